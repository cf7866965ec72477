// Silent data corruption of resident state, end to end (docs/protect.md, "Silent data
// corruption"): `mpirun --enable-recovery dp-launch --spares 1 -- rtft-train` where one rank
// flips a bit of its copy of a replicated parameter between two steps (`train.flip`). The
// replicated tensors' cross-check finds the copy that differs from the others' at the next
// step's exchange; every rank goes back to that step's snapshot, the corrupt copy fed from a
// peer, and the step runs again: each run ends with the digest of the run without the flip,
// bit for bit. A rank that corrupts its state at every step is replaced by the spare; with two
// copies (no majority) both go back to the last step whose copies agreed.
#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kTrain = {"--steps", "120", "--hidden",    "128",
                                         "--batch", "8",   "--log-every", "1000"};

class SdcJobTest : public TrainJobTest {
 protected:
  SdcJobTest() : TrainJobTest(kTrain, 1000) {}
};

TEST_F(SdcJobTest, AFlippedBitInAReplicatedCopyIsRepairedFromAPeer) {
  Run run = Start("flip-once", 3, 1, "1:train.flip@40:flag", 0);
  ExpectIdentical(run, 3, "one flipped bit");
  EXPECT_NE(run.output.find("silent data corruption: at step "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the replicated tensors of data-parallel rank(s) 1 differ"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 1 (rank 1): silent data corruption, repaired from a peer 1/"),
            std::string::npos)
      << run.output;
  // Repaired in place: no slot lost, no spare taken.
  EXPECT_EQ(run.output.find("role=spare-activated"), std::string::npos) << run.output;
}

TEST_F(SdcJobTest, ARankThatKeepsCorruptingItsStateIsReplacedByTheSpare) {
  Run run = Start("flip-always", 3, 1, "1:train.flip@40:flags", 0);
  ExpectIdentical(run, 3, "a bit flipped at every step");
  EXPECT_NE(run.output.find("slot 1 (rank 1): silent data corruption, repaired from a peer 3/3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 1 (rank 1): repeated failures, slot retired; rank 1 -> spare "
                            "slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
}

TEST_F(SdcJobTest, TwoCopiesThatDifferGoBackToTheLastAgreedStep) {
  Run run = Start("two-copies", 2, 1, "1:train.flip@40:flag", 0);
  ExpectIdentical(run, 2, "two copies differ");
  EXPECT_NE(run.output.find("2 copies differ with no majority; back to the step before"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("role=spare-activated"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
