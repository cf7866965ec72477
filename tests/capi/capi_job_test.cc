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

  // `mode`: "" (compute), "split" (local and reduce) or "replay" (split, every step replayed).
  Run Start(const std::string& name, const std::string& fault = "", bool lose = false,
            const std::string& mode = "") {
    const std::string dir = root_ + "/" + name;
    std::filesystem::create_directories(dir);
    JobSpec spec;
    spec.slots = 4;
    spec.dp_args = {"--spares", "1", "--heartbeat-ms", "50", "--heartbeat-timeout-ms", "500"};
    spec.app = {RTFT_CAPI_JOB, "30"};
    if (!mode.empty()) spec.app.push_back(mode);
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

// The replay of steps through the C API (rtft_protector_run_split, rtft_step_gradients,
// options.replay_every = 1): rank 1 flips a bit of its own gradients ("capi.grad_flip"), once
// (a transient fault: the step goes on) and from the 9th step on (a faulty device: its slot is
// retired and the spare takes rank 1). Each run ends with the digest of the replayed run without
// the flip (and of the split run without the replay: the replay changes no bit); without the
// replay the flip changes it.
TEST_F(CapiJobTest, TheReplayCatchesAFlippedGradient) {
  const Run ref = Start("replay-ref", "", false, "replay");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.done.size(), 3u) << ref.output;
  const std::string want = ref.done.begin()->second;
  for (const auto& [rank, done] : ref.done) EXPECT_EQ(done, want) << rank;
  EXPECT_EQ(ref.output.find("silent data corruption"), std::string::npos) << ref.output;

  const Run once = Start("replay-once", "1/capi.grad_flip@9:flag", false, "replay");
  EXPECT_EQ(once.exit_code, 0) << once.output;
  EXPECT_NE(once.output.find("a transient fault, the step goes on"), std::string::npos)
      << once.output;
  ASSERT_EQ(once.done.size(), 3u) << once.output;
  for (const auto& [rank, done] : once.done) EXPECT_EQ(done, want) << rank << "\n" << once.output;

  const Run always = Start("replay-always", "1/capi.grad_flip@9:flags", false, "replay");
  EXPECT_EQ(always.exit_code, 0) << always.output;
  EXPECT_NE(always.output.find("its device is taken for faulty"), std::string::npos)
      << always.output;
  EXPECT_NE(always.output.find("device error, slot retired"), std::string::npos) << always.output;
  ASSERT_EQ(always.done.size(), 3u) << always.output;
  for (const auto& [rank, done] : always.done)
    EXPECT_EQ(done, want) << rank << "\n" << always.output;

  // Split but not replayed: the same bits without a flip, other bits with it (unseen).
  const Run split = Start("split-ref", "", false, "split");
  ASSERT_EQ(split.done.size(), 3u) << split.output;
  for (const auto& [rank, done] : split.done) EXPECT_EQ(done, want) << rank;
  const Run unseen = Start("split-flip", "1/capi.grad_flip@9:flag", false, "split");
  EXPECT_EQ(unseen.exit_code, 0) << unseen.output;
  ASSERT_EQ(unseen.done.size(), 3u) << unseen.output;
  for (const auto& [rank, done] : unseen.done) EXPECT_NE(done, want) << rank;
  EXPECT_EQ(unseen.output.find("silent data corruption"), std::string::npos) << unseen.output;

  // The check for non-finite gradients, told by the application (rtft_step_nonfinite) once: the
  // step is replayed by a peer, is finite the second time and goes on, bitwise.
  const Run told = Start("finite-told", "1/capi.loss_nan@9:flag", false, "finite");
  EXPECT_EQ(told.exit_code, 0) << told.output;
  EXPECT_NE(told.output.find("the gradients of data-parallel rank(s) 1 are not finite: the step "
                             "is replayed by a peer"),
            std::string::npos)
      << told.output;
  EXPECT_NE(told.output.find("are finite when computed again: a transient fault"),
            std::string::npos)
      << told.output;
  ASSERT_EQ(told.done.size(), 3u) << told.output;
  for (const auto& [rank, done] : told.done) EXPECT_EQ(done, want) << rank << "\n" << told.output;
}

}  // namespace
}  // namespace rtft::launch::test
