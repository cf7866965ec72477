// One job of the example and C API tests: the program started under dp-launch with its fault
// log in its directory, slot 1 lost when asked, and what the job printed. Header-only, for the
// tests that link launch_job.cc.
#pragma once

#include <signal.h>

#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {

struct SlotLossRun {
  int exit_code = -1;
  std::string output;
};

// Starts `spec` in `dir` with RTFT_FAULT_LOG=<dir>/faults.log (and RTFT_FAULT=`fault` when
// given); with `lose`, SIGKILLs slot 1's dp-launch once a fault line is logged (the process
// stands at its point); waits for the job to end. With `fault`, the fault must have fired in
// slot 1.
inline SlotLossRun RunLosingSlotOne(const std::string& dir, JobSpec spec, const std::string& fault,
                                    bool lose) {
  using std::chrono::seconds;
  Job job(dir);
  spec.env["RTFT_FAULT_LOG"] = dir + "/faults.log";
  spec.env["RTFT_COMM_GLOO_HOST"] = "127.0.0.1";
  if (!fault.empty()) spec.env["RTFT_FAULT"] = fault;
  job.Start(spec);
  if (lose) {
    EXPECT_TRUE(WaitFor(
        [&] {
          std::ifstream in(dir + "/faults.log");
          return in.peek() != std::ifstream::traits_type::eof();
        },
        seconds(60)))
        << job.Output();
    const pid_t agent = job.AgentOf(1);
    EXPECT_GT(agent, 0);
    if (agent > 0) kill(agent, SIGKILL);
  }
  SlotLossRun run;
  EXPECT_TRUE(job.Wait(seconds(120)).has_value()) << "the job did not end\n" << job.Output();
  run.exit_code = job.JobExitCode();
  run.output = job.Output();
  if (!fault.empty()) {
    std::ifstream in(dir + "/faults.log");
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find("slot=1"), std::string::npos) << "the fault never fired\n" << run.output;
  }
  return run;
}

}  // namespace rtft::launch::test
