// The hot swap of a 2 x 2 x 2 tensor x pipeline x data layout end to end: `rtft-train --tp 2 --pp
// 2` on 8 ranks under `mpirun --enable-recovery dp-launch` with spares, a rank of each (t, p)
// partition lost with its slot at another phase of a step (the capture, the pipeline's send, the
// tensor group's reduction, the update), an application crash, two ranks of different
// data-parallel groups lost at once, and the two ranks of one data-parallel ring lost together
// (the newest L3 version). Every run ends with the digest of the same run without a failure, on
// every rank. Ten processes and their threads share two cores: the heartbeat timeout is 3 s and
// the model a few KiB per rank.
#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kGridTrain = {
    "--tp",        "2",  "--pp",    "2",  "--hidden",        "16",
    "--batch",     "4",  "--steps", "10", "--micro-batches", "2",
    "--log-every", "100"};

// Ranks by (t, p, d): t + 2 * (d + 2 * p). The d = 1 ones are used: rank 0's slot hosts the
// coordinator, which a job does not survive losing (yet).
constexpr int kRank001 = 2, kRank101 = 3, kRank011 = 6, kRank111 = 7, kRank110 = 5;

class GridJobTest : public TrainJobTest {
 protected:
  GridJobTest() : TrainJobTest(kGridTrain, 3000) {}
};

TEST_F(GridJobTest, ARankOfEachPartitionLostAtAnotherPhaseIsReplacedByASpare) {
  for (const std::string& fault : {std::to_string(kRank001) + ":protect.capture@5:hang",
                                   std::to_string(kRank101) + ":train.pipeline@9:hang",
                                   std::to_string(kRank011) + ":train.tensor@9:hang",
                                   std::to_string(kRank111) + ":protect.update@5:hang"}) {
    SCOPED_TRACE(fault);
    Run run = Start("lost-" + fault.substr(0, 1), 8, 1, fault, 1);
    ExpectIdentical(run, 8, "slot lost: " + fault);
    EXPECT_NE(run.output.find("role=spare-activated rank=" + fault.substr(0, 1)), std::string::npos)
        << run.output;
  }
}

TEST_F(GridJobTest, ACrashedApplicationRestartsFromItsOwnSnapshot) {
  Run run = Start("crash", 8, 1, std::to_string(kRank110) + ":train.backward@5:kill", 0);
  ExpectIdentical(run, 8, "crash");
  EXPECT_NE(run.output.find("role=restarted rank=5"), std::string::npos) << run.output;
}

TEST_F(GridJobTest, TwoRanksOfDifferentDataParallelGroupsLostTogetherAreBothReplaced) {
  Run run = Start("two-groups", 8, 2,
                  std::to_string(kRank001) + ":protect.update@6:hang," + std::to_string(kRank110) +
                      ":protect.update@6:hang",
                  2);
  ExpectIdentical(run, 8, "two ranks of different groups");
}

TEST_F(GridJobTest, BothRanksOfADataParallelRingLostFallBackToL3) {
  // Ranks 5 and 7 are (1, 1)'s whole ring: neither holds the other's replica any more.
  const std::string ckpt = root_ + "/l3";
  Run run = Start("ring", 8, 2,
                  std::to_string(kRank110) + ":protect.update@8:hang," + std::to_string(kRank111) +
                      ":protect.update@8:hang",
                  2, {"--l3-every", "3", "--ckpt-dir", ckpt}, {},
                  [&] { return CommittedAtLeast(ckpt, 3); });
  ExpectIdentical(run, 8, "a whole ring lost, L3 fallback");
  // Step 6's version, or step 3's when step 6's commit was still under way at the failure.
  EXPECT_NE(run.output.find("from the L3 checkpoint"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("source=l3"), std::string::npos) << run.output;
}

// `--shared-shards`: each partition's parameters described as its shard of its stage's (rows
// [t n, (t + 1) n) of a tensor named p<p>/params, the same name in both partitions), which its
// data-parallel group shares (ShardCoords::replicated, HSDP's layout). A lost rank takes them from
// a live replica of its partition; with a whole ring lost, from the L3 version, whose rows sit at
// their place in the stage's tensor (written at the shard's own offsets, the two partitions' rows
// would land on each other). Both end with the digest of the run without the option or a failure.
TEST_F(GridJobTest, AShardItsDataParallelGroupSharesComesFromALiveReplicaOrFromL3) {
  Run lost = Start("shared-lost", 8, 1, std::to_string(kRank111) + ":protect.update@5:hang", 1,
                   {"--shared-shards"});
  ExpectIdentical(lost, 8, "shared shards, a slot lost");
  EXPECT_NE(lost.output.find("role=spare-activated rank=7"), std::string::npos) << lost.output;
  const std::string ckpt = root_ + "/shared-l3";
  Run ring = Start("shared-ring", 8, 2,
                   std::to_string(kRank110) + ":protect.update@8:hang," + std::to_string(kRank111) +
                       ":protect.update@8:hang",
                   2, {"--shared-shards", "--l3-every", "3", "--ckpt-dir", ckpt}, {},
                   [&] { return CommittedAtLeast(ckpt, 3); });
  ExpectIdentical(ring, 8, "shared shards, a whole ring lost, L3 fallback");
  EXPECT_NE(ring.output.find("source=l3"), std::string::npos) << ring.output;
}

TEST_F(GridJobTest, SparesExhaustedUnderShrinkTheReplicaLeavesAsInARunToldToDropIt) {
  // No spare: rank 7's slot, (1, 1, 1), lost at the update. Its replica d = 1 (ranks 2, 3, 6, 7)
  // leaves, slots 2, 3 and 6 join the spare pool, and ranks 0, 1, 4, 5 go on as ranks 0 to 3
  // with one replica, each partition's optimizer state gathered from its two old shards (one in
  // the survivor's L1, one in its replica of rank 7's neighbour).
  Run run = Start("shrink", 8, 0, std::to_string(kRank111) + ":protect.update@5:hang", 1, {},
                  {"--on-spares-exhausted", "shrink", "--grid", "2x2"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 4u) << run.output;
  EXPECT_NE(run.output.find("slot(s) 2,3,6 join the spare pool"), std::string::npos) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex(R"(recovered epoch=\d+ step=(\d+) world=4 source=l1 )")))
      << run.output;
  const std::string step = m[1];
  Run ref = Start("shrink-reference", 8, 0, "", 0, {"--drop-replica", "1@" + step});
  EXPECT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.digests.size(), 4u) << ref.output;
  EXPECT_NE(ref.output.find("left the layout step=" + step), std::string::npos) << ref.output;
  const std::string want = ref.digests.begin()->second;
  for (const auto& [rank, digest] : ref.digests)
    EXPECT_EQ(digest, want) << "reference rank " << rank;
  for (const auto& [rank, digest] : run.digests) EXPECT_EQ(digest, want) << "rank " << rank;
  // Not the digest of the eight-rank run: dropping the replica changed the result, as it should.
  EXPECT_NE(want, Reference(8));
}

TEST_F(GridJobTest, ALossAfterTheShrinkIsTakenByASpareTheReplicaLeft) {
  // As above, then (old) rank 5's slot, rank 3 of the one replica left, is lost too: slot 2, a
  // spare since the shrink, takes rank 3. One replica holds no copy of another's shards: the job
  // restores the newest L3 version, written after the shrink (the state of a run told to drop the
  // replica at the shrink's step, so the digest is that run's).
  const std::string ckpt = root_ + "/after-l3", dir = root_ + "/after";
  const std::vector<std::string> l3 = {"--l3-every", "2", "--ckpt-dir", ckpt};
  Run run =
      Start("after", 8, 0,
            std::to_string(kRank111) + ":protect.update@5:hang," + std::to_string(kRank110) +
                ":protect.update@9:hang",
            1, l3, {"--on-spares-exhausted", "shrink", "--grid", "2x2"}, nullptr, [&](Job& job) {
              LoseSlotAtItsFault(job, dir, kRank110, [&] { return CommittedAtLeast(ckpt, 6); });
            });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 4u) << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=3 world=4"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("source=l3"), std::string::npos) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex(R"(recovered epoch=\d+ step=(\d+) world=4 source=l1 )")))
      << run.output;
  Run ref = Start("after-reference", 8, 0, "", 0,
                  {"--drop-replica", "1@" + std::string(m[1]), "--l3-every", "2", "--ckpt-dir",
                   root_ + "/after-reference-l3"});
  ASSERT_EQ(ref.digests.size(), 4u) << ref.output;
  for (const auto& [rank, digest] : run.digests)
    EXPECT_EQ(digest, ref.digests.begin()->second) << "rank " << rank;
}

// The replay of steps in a grid (docs/protect.md, "Replay"): 2 x 1 x 3 (ranks t + 2 d), every
// step replayed, replica d running replica d - 1's step whole (the tensor group's collectives are
// in the local compute). Rank 2, (0, 0, 1), flips a bit of its gradients once: its replica runs
// its step again, rank 3 with it, and the step goes on. Rank 5, (1, 0, 2), flips at every step
// from its 8th compute: taken for a faulty device, its slot is retired and the spare takes rank 5.
// The run ends with the digest of the run without the replay or a flip.
TEST_F(GridJobTest, AReplicaReplaysItsNeighboursStepWholeAndAFaultyRankGoesToASpare) {
  const std::vector<std::string> layout = {"--pp", "1"};
  ASSERT_FALSE(Reference(6, layout).empty());
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "1";
  Run run = Start("replay", 6, 1, "2:train.grad_flip@4:flag,5:train.grad_flip@8:flags", 0, layout);
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectIdentical(run, 6, "a transient flip and a faulty device, replayed in a grid", layout);
  EXPECT_NE(run.output.find("the gradients of rank 2 (t 0, p 0, d 1) differ from its replay by "
                            "rank 4 (t 0, p 0, d 2); its second run agrees with the replay: a "
                            "transient fault"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("the gradients of rank 5 (t 1, p 0, d 2) differ from its replay by "
                            "rank 1 (t 1, p 0, d 0); its second run disagrees too: its device is "
                            "taken for faulty"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=5"), std::string::npos) << run.output;
}

TEST_F(GridJobTest, AShrinkWithoutTheGridAtTheLauncherEndsWithAClearError) {
  // dp-launch without --grid renumbers the seven survivors densely: no 2 x 2 layout fits.
  Run run = Start("shrink-flat", 8, 0, std::to_string(kRank101) + ":protect.update@5:hang", 1, {},
                  {"--on-spares-exhausted", "shrink"});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("run it with --grid 2x2"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
