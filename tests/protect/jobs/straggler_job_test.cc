// A slow rank swapped out, end to end (docs/protect.md, "Stragglers"): `mpirun --enable-recovery
// dp-launch --spares 1 -- rtft-train` with one rank made slow by repeating its local compute
// ("train.compute:repeat=F", the same bits F times over). The coordinator's straggler detector,
// with its default threshold and window, names it; with a spare free, its slot is retired and
// the spare takes the rank at a step boundary (a planned swap: nothing runs again), and the run
// ends with the digest of the run without the slow rank, bit for bit; a swap that cannot pause
// falls back to the lost-slot path; with no spare, the rank is reported and the run goes on. A
// clean run swaps nobody.
#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

// Long enough for several windows of 50 steps before and after the slowdown.
const std::vector<std::string> kTrain = {"--steps", "400", "--hidden",    "256",
                                         "--batch", "64",  "--log-every", "1000"};

class StragglerJobTest : public TrainJobTest {
 protected:
  StragglerJobTest() : TrainJobTest(kTrain, 1000) {
    // The detector's defaults, said out loud: the job fixture turns it off for the other job
    // tests (launch_job.h, Job::Start), which run more ranks than CI has cores.
    env_["RTFT_STRAGGLER_PCT"] = "20";
    env_["RTFT_STRAGGLER_WINDOW"] = "50";
  }

  static std::string Line(const std::string& output, const std::string& start) {
    const size_t at = output.find(start);
    if (at == std::string::npos) return "";
    return output.substr(at, output.find('\n', at) - at);
  }
};

// The planned swap: every rank pauses at one step once its snapshot is replicated, the spare
// takes the slow rank's replica of that step, and nothing runs again.
TEST_F(StragglerJobTest, ASlowRankIsSwappedAtAStepBoundaryAndNothingRunsAgain) {
  Run run = Start("swapped", 3, 1, "1:train.compute@30:repeat=3", 0);
  ExpectIdentical(run, 3, "slow rank swapped");
  const std::string verdict = Line(run.output, "straggler: rank 1 on slot 1 ");
  ASSERT_FALSE(verdict.empty()) << run.output;
  EXPECT_NE(verdict.find("a planned swap"), std::string::npos) << verdict;
  const std::string paused = Line(run.output, "planned swap: every rank paused at step ");
  ASSERT_FALSE(paused.empty()) << run.output;
  const std::string step = std::to_string(
      std::stoull(paused.substr(paused.find("at step ") + 8)));  // the step they paused at
  EXPECT_NE(run.output.find("slot 1 (rank 1): straggler, slot retired; rank 1 -> spare slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
  // Every rank, the spare too, resumed at the step they paused at, and no step failed: nothing
  // ran again.
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(run.output.find("[train " + std::to_string(rank) +
                              "] recovered epoch=2 step=" + step + " "),
              std::string::npos)
        << "rank " << rank << "\n"
        << run.output;
  EXPECT_EQ(run.output.find("] failure step="), std::string::npos) << run.output;
  // Nobody else was taken for slow, before or after the swap.
  EXPECT_EQ(run.output.find("straggler: rank 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("straggler: rank 2"), std::string::npos) << run.output;
}

// A rank that never says it paused (held at `protect.pause`): the swap is called off at its
// deadline and the slot retired at once, through the lost-slot path; the run still ends the same.
TEST_F(StragglerJobTest, ASwapThatCannotPauseFallsBackToTheLostSlotPath) {
  Run run = Start("fallback", 3, 1, "1:train.compute@30:repeat=3,1:protect.pause:hang", 0);
  ExpectIdentical(run, 3, "swap called off");
  const std::string off = Line(run.output, "planned swap at step ");
  ASSERT_FALSE(off.empty()) << run.output;
  EXPECT_NE(off.find("2 of 3 ranks paused in time; called off, slot 1 retired at once"),
            std::string::npos)
      << off;
  EXPECT_NE(run.output.find("rank 1 -> spare slot 3"), std::string::npos) << run.output;
}

TEST_F(StragglerJobTest, WithNoSpareFreeASlowRankIsOnlyReported) {
  Run run = Start("reported", 3, 0, "1:train.compute@30:repeat=3", 0);
  const std::string verdict = Line(run.output, "straggler: rank 1 on slot 1 ");
  ASSERT_FALSE(verdict.empty()) << run.output;
  EXPECT_NE(verdict.find("no spare is free: reported only"), std::string::npos) << verdict;
  // Reported once, and the run went on unchanged: no recovery, the reference's bits.
  EXPECT_EQ(run.output.find("straggler: ", run.output.find(verdict) + verdict.size()),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.recoveries, 0) << run.output;
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string& want = Reference(3);
  ASSERT_EQ(run.digests.size(), 3u) << run.output;
  for (const auto& [rank, digest] : run.digests) EXPECT_EQ(digest, want) << "rank " << rank;
}

// No more ranks than the machine has cores: nobody is slow, nobody is swapped.
TEST_F(StragglerJobTest, ACleanRunSwapsNobody) {
  Run run = Start("clean", 2, 1, "", 0, {"--steps", "600"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("straggler: "), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("epoch 2"), std::string::npos) << run.output;
  EXPECT_EQ(run.recoveries, 0) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
