// The GoogleTest fixture shared by the launcher tests: a fresh job directory per test, a Job
// (launch_job.h) to start, and the helpers that read what the applications logged. Each test
// file derives from it and says how its launcher is run and what its exit status means.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {

class JobFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rtft-launch-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    job_ = std::make_unique<Job>(dir_);
  }
  void TearDown() override {
    job_.reset();
    if (!HasFailure()) {
      std::error_code e;
      std::filesystem::remove_all(dir_, e);
    }
  }

  // Short heartbeats so a lost slot is noticed in about a second; the test application runs
  // `steps` steps of 100 ms.
  static JobSpec BaseSpec(int slots, int spares, int steps) {
    JobSpec spec;
    spec.slots = slots;
    spec.dp_args = {"--spares", std::to_string(spares),   "--heartbeat-ms",
                    "100",      "--heartbeat-timeout-ms", "1000"};
    spec.env = {{"RTFT_TEST_STEPS", std::to_string(steps)}, {"RTFT_TEST_STEP_MS", "100"}};
    return spec;
  }
  // Waits until `rank` logged a step >= `step`.
  void WaitStep(int rank, long step) {
    ASSERT_TRUE(WaitFor([&] { return job_->LastStep(rank) >= step; }, std::chrono::seconds(30)))
        << "rank " << rank << " never reached step " << step << "\n"
        << job_->Dump();
  }
  // The launcher's own exit status; nullopt (and a failure) when the job did not end. Fails
  // too when a process of the job outlived the launcher.
  std::optional<int> WaitLauncher(std::chrono::seconds limit = std::chrono::seconds(60)) {
    auto rc = job_->Wait(limit);
    EXPECT_TRUE(rc.has_value()) << "the job did not end\n" << job_->Dump();
    EXPECT_EQ(job_->leftovers(), "") << "processes of the job outlived the launcher\n"
                                     << job_->Dump();
    return rc;
  }
  std::vector<LogLine> Starts(int slot) { return LinesOf(dir_, slot, "start"); }
  // The time (us) of the last line that the process with log id `id` wrote on `slot`.
  long LastTime(int slot, const std::string& id) {
    long t = -1;
    for (const auto& l : ReadSlotLog(dir_, slot))
      if (l.Get("id") == id) t = std::max(t, l.Int("t"));
    return t;
  }
  std::vector<LogLine> Events(int slot) { return LinesOf(dir_, slot, "event"); }
  // Tells the test application of `rank` to do `cmd` (crash, hang, exit N), atomically.
  void Command(int rank, const std::string& cmd) {
    const std::string path = dir_ + "/cmd-rank" + std::to_string(rank);
    FILE* f = std::fopen((path + ".tmp").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "%s\n", cmd.c_str());
    std::fclose(f);
    ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
  }

  std::string dir_;
  std::unique_ptr<Job> job_;
};

}  // namespace rtft::launch::test
