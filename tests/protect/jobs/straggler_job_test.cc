// A slow rank swapped out, end to end (docs/protect.md, "Stragglers"): `mpirun --enable-recovery
// dp-launch --spares 1 -- rtft-train` with one rank made slow by repeating its local compute
// ("train.compute:repeat=F", the same bits F times over). The coordinator's straggler detector,
// with its default threshold and window, names it; with a spare free, its slot is retired and
// the spare takes the rank, and the run ends with the digest of the run without the slow rank,
// bit for bit; with none, it is reported and the run goes on. A clean run swaps nobody.
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

TEST_F(StragglerJobTest, ASlowRankIsSwappedForTheSpareAndTheRunEndsTheSame) {
  Run run = Start("swapped", 3, 1, "1:train.compute@30:repeat=3", 0);
  ExpectIdentical(run, 3, "slow rank swapped");
  const std::string verdict = Line(run.output, "straggler: rank 1 on slot 1 ");
  ASSERT_FALSE(verdict.empty()) << run.output;
  EXPECT_NE(verdict.find("a spare takes the rank"), std::string::npos) << verdict;
  EXPECT_NE(run.output.find("slot 1 (rank 1): straggler, slot retired; rank 1 -> spare slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
  // Nobody else was taken for slow, before or after the swap.
  EXPECT_EQ(run.output.find("straggler: rank 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("straggler: rank 2"), std::string::npos) << run.output;
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
