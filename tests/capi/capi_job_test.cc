// capi_job (a C program on the C API) under `mpirun --enable-recovery dp-launch --spares 1`:
// every collective checked on 3 ranks, then the driver with C step functions; with slot 1's
// process failed at a named point (RTFT_FAULT="1/point@n:action") and, for a lost slot, its
// dp-launch SIGKILLed there, every rank must end with the digest and step count of the run
// without the failure.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

class CapiJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rtft-capi-job-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    if (!HasFailure()) {
      std::error_code e;
      std::filesystem::remove_all(root_, e);
    }
  }

  struct Run {
    int exit_code = -1;
    std::string output;
    std::map<int, std::string> done;  // rank -> "steps=... counter=... digest=..."
  };

  Run Start(const std::string& name, const std::string& fault = "", bool lose = false) {
    const std::string dir = root_ + "/" + name;
    std::filesystem::create_directories(dir);
    Job job(dir);
    JobSpec spec;
    spec.slots = 4;
    spec.dp_args = {"--spares", "1", "--heartbeat-ms", "50", "--heartbeat-timeout-ms", "500"};
    spec.app = {RTFT_CAPI_JOB, "30"};
    spec.env = {{"RTFT_FAULT_LOG", dir + "/faults.log"}, {"RTFT_COMM_GLOO_HOST", "127.0.0.1"}};
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
    Run run;
    EXPECT_TRUE(job.Wait(seconds(120)).has_value()) << "the job did not end\n" << job.Output();
    run.exit_code = job.JobExitCode();
    run.output = job.Output();
    static const std::regex done(R"(\[capi (\d+)\] done (steps=\S+ counter=\S+ digest=\S+))");
    for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), done);
         it != std::sregex_iterator(); ++it)
      run.done[std::stoi((*it)[1])] = (*it)[2];
    if (!fault.empty()) {
      std::ifstream in(dir + "/faults.log");
      std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(log.find("slot=1"), std::string::npos) << "the fault never fired\n" << run.output;
    }
    return run;
  }

  std::string root_;
};

TEST_F(CapiJobTest, CollectivesAndTheDriverSurviveALostSlotAndACrash) {
  const Run ref = Start("ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(ref.output.find("[capi " + std::to_string(r) + "] collectives ok"), std::string::npos)
        << ref.output;
  ASSERT_EQ(ref.done.size(), 3u) << ref.output;
  const std::string want = ref.done.begin()->second;
  EXPECT_NE(want.find("steps=30 counter=30 "), std::string::npos) << want;
  for (const auto& [rank, done] : ref.done) EXPECT_EQ(done, want) << rank;
  EXPECT_NE(ref.output.find("[capi 0] events=0 failed=none"), std::string::npos) << ref.output;

  for (const auto& [name, fault, lose] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"lost", "1/protect.update@12:hang", true}, {"crash", "1/capi.compute@9:kill", false}}) {
    SCOPED_TRACE(name);
    const Run run = Start(name, fault, lose);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("[capi 1] recovered at step"), std::string::npos) << run.output;
    // The survivors polled the failure event that named rank 1 (rtft_runtime_poll_event).
    for (const char* line : {"[capi 0] events=1 failed=1", "[capi 2] events=1 failed=1"})
      EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
    ASSERT_EQ(run.done.size(), 3u) << run.output;
    for (const auto& [rank, done] : run.done) EXPECT_EQ(done, want) << rank << "\n" << run.output;
  }
}

}  // namespace
}  // namespace rtft::launch::test
