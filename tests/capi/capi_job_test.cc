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
#include "launcher/slot_loss_run.h"

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
    JobSpec spec;
    spec.slots = 4;
    spec.dp_args = {"--spares", "1", "--heartbeat-ms", "50", "--heartbeat-timeout-ms", "500"};
    spec.app = {RTFT_CAPI_JOB, "30"};
    const SlotLossRun job = RunLosingSlotOne(dir, spec, fault, lose);
    Run run;
    run.exit_code = job.exit_code;
    run.output = job.output;
    static const std::regex done(R"(\[capi (\d+)\] done (steps=\S+ counter=\S+ digest=\S+))");
    for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), done);
         it != std::sregex_iterator(); ++it)
      run.done[std::stoi((*it)[1])] = (*it)[2];
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
