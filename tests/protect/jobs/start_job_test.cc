// A job's start, end to end (`mpirun --enable-recovery dp-launch -- rtft-train`, docs/protect.md):
// a rank lost before the first snapshot (the job starts again at step 0), a job started again
// from its newest L3 version, and one that finds the files an earlier run left after LATEST. Every
// run must end with the digest of the same run without a failure, bit for bit, on every rank.
#include "protect/jobs/train_job.h"

#include <filesystem>

#include "rtft/checkpoint.h"

namespace rtft::launch::test {
namespace {

// The model of protect_job_test: the matrix of runs stays within CI's budget.
const std::vector<std::string> kTrain = {"--steps", "16", "--hidden",    "192",
                                         "--batch", "8",  "--log-every", "100"};

class StartJobTest : public TrainJobTest {
 protected:
  StartJobTest() : TrainJobTest(kTrain, 500) {}
};

// A rank lost before the job's first snapshot (docs/protect.md, "Lost before the first
// snapshot"): while the ranks start (`protect.start`, before the first epoch's communicators) or
// in the capture of step 0. Memory holds no step every rank can restore and there is no L3
// checkpoint: the job starts again at step 0, each rank from the state it built (the spare, or
// the restarted process, builds the one the lost rank had) or its L1 of step 0, and ends with the
// failure-free digest.
TEST_F(StartJobTest, ARankLostBeforeTheFirstSnapshotStartsTheJobAgainAtStepZero) {
  for (const std::string& point : {"protect.start", "protect.capture@1"}) {
    for (const auto& [action, lose] :
         std::vector<std::pair<std::string, int>>{{"kill", 0}, {"hang", 1}}) {
      SCOPED_TRACE(point + " " + action);
      Run run = Start("start-" + point + "-" + action, 4, 1, "1:" + point + ":" + action, lose);
      ExpectIdentical(run, 4, "rank lost at " + point + " (" + action + ")");
      EXPECT_NE(run.output.find(" step=0 world=4 source=start"), std::string::npos) << run.output;
      EXPECT_NE(run.output.find(lose ? "role=spare-activated rank=1" : "role=restarted"),
                std::string::npos)
          << run.output;
    }
  }
}

TEST_F(StartJobTest, AJobStartedAgainResumesFromItsNewestL3Checkpoint) {
  const std::string ckpt = root_ + "/l3-resume";
  // 12 of the 16 steps, with L3 at steps 5 and 10; then the whole job again, to 16.
  Run first =
      Start("resume-1", 4, 0, "", 0, {"--l3-every", "5", "--ckpt-dir", ckpt, "--steps", "12"});
  EXPECT_EQ(first.exit_code, 0) << first.output;
  Run again = Start("resume-2", 4, 0, "", 0, {"--l3-every", "5", "--ckpt-dir", ckpt});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("restored step 10 from the L3 checkpoint"), std::string::npos)
      << again.output;
  ASSERT_EQ(again.digests.size(), 4u) << again.output;
  for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(4)) << rank;
}

// A run that died while it wrote an L3 version leaves files of that version after LATEST; the job
// started again writes the version once more (with the same write id: it is epoch 1 again).
// Rank 0 removes them before the first epoch's communicators, so the new version is made of this
// run's files only: it verifies, and the run ends identical.
TEST_F(StartJobTest, AJobStartedAgainRemovesTheFilesAnEarlierRunLeftAfterLatest) {
  const std::string ckpt = root_ + "/l3-leftovers";
  const std::string v15 = ckpt + "/v000000000015";  // docs/format.md, "Directory layout"
  // Rank 0's flush of version 15 (its third file) never renames its file; the others' files of
  // version 15 land, LATEST stays at 10; then the whole job is killed.
  Run died =
      Start("leftovers-1", 4, 0, "0:ckpt.synced@3:hang", 0, {"--l3-every", "5", "--ckpt-dir", ckpt},
            {}, nullptr, [&](Job& job) {
              EXPECT_TRUE(WaitFor(
                  [&] {
                    for (int r = 1; r < 4; ++r)
                      if (!std::filesystem::exists(v15 + "/rank-0000" + std::to_string(r) + ".h5"))
                        return false;
                    return true;
                  },
                  seconds(60)))
                  << job.Output();
              for (int slot = 0; slot < 4; ++slot)
                if (const pid_t agent = job.AgentOf(slot); agent > 0) kill(agent, SIGKILL);
            });
  ASSERT_TRUE(CommittedAtLeast(ckpt, 10) && !CommittedAtLeast(ckpt, 15)) << died.output;
  Run again = Start("leftovers-2", 4, 0, "", 0, {"--l3-every", "5", "--ckpt-dir", ckpt});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("restored step 10 from the L3 checkpoint"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("removed version 15 (incomplete), newer than LATEST 10"),
            std::string::npos)
      << again.output;
  ASSERT_EQ(again.digests.size(), 4u) << again.output;
  for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(4)) << rank;
  EXPECT_TRUE(CommittedAtLeast(ckpt, 15)) << again.output;
  const Status verified = VerifyVersion(ckpt, 15);
  EXPECT_TRUE(verified.ok()) << verified;
}

}  // namespace
}  // namespace rtft::launch::test
