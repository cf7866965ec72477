// The hot swap end to end: `mpirun --enable-recovery dp-launch --spares S -- rtft-train` with a
// rank failing at a named phase of a step (docs/testing.md): the application crashed (restarted
// on its slot, restoring its own L1 snapshot), or its whole slot lost (a spare fed from the
// neighbours' L1 and L2), during the capture, the L2 replication, a collective, the update, the
// recovery itself. Every run must end with the digest of the same run without a failure, bit for
// bit, on every rank.
#include "protect/jobs/train_job.h"

#include <unistd.h>

#include <sstream>
#include <thread>

namespace rtft::launch::test {
namespace {

// A small model: the matrix of runs stays within CI's budget.
const std::vector<std::string> kTrain = {"--steps", "16", "--hidden",    "192",
                                         "--batch", "8",  "--log-every", "100"};

class ProtectJobTest : public TrainJobTest {
 protected:
  ProtectJobTest() : TrainJobTest(kTrain, 500) {}
};

TEST_F(ProtectJobTest, ACrashedApplicationRestartsFromItsOwnSnapshotAtEveryPhase) {
  for (const std::string& point : {"protect.capture@6", "protect.l2.send@6", "train.backward@6",
                                   "comm.gloo.ring_segment@25", "protect.update@6"}) {
    SCOPED_TRACE(point);
    Run run = Start("crash-" + point, 4, 1, "1:" + point + ":kill", 0);
    ExpectIdentical(run, 4, "crash at " + point);
    EXPECT_NE(run.output.find("role=restarted"), std::string::npos) << run.output;
  }
}

// A replicated tensor that compute changes (`rtft-train --buffers`: a running statistic that
// each rank holds its own of, as a module buffer under DDP differs per rank between steps) is each
// rank's own state: a spare that takes a lost rank gets it from that rank's L2 replica, never from
// a peer's copy, and a crashed rank from its own snapshot; each run ends with the failure-free
// digest, every rank's statistic in it (fed from a peer, rank 1's was rank 0's: another digest).
// The statistic is 2 MiB, more than the objects' room: a holder that left it out of the most a
// replica may hold refused its neighbour's replica.
TEST_F(ProtectJobTest, ATensorThatComputeChangesComesBackAsTheRanksOwn) {
  Run lost = Start("buffers-lost", 3, 1, "1:protect.update@6:hang", 1, {"--buffers"});
  ExpectIdentical(lost, 3, "a statistic of each rank's own, a slot lost", {"--buffers"});
  EXPECT_NE(lost.output.find("role=spare-activated rank=1"), std::string::npos) << lost.output;
  Run crash = Start("buffers-crash", 3, 1, "1:train.backward@6:kill", 0, {"--buffers"});
  ExpectIdentical(crash, 3, "a statistic of each rank's own, a crash", {"--buffers"});
  EXPECT_EQ(lost.output.find("silent data corruption"), std::string::npos) << lost.output;
}

TEST_F(ProtectJobTest, ALostSlotIsReplacedByASpareAtEveryPhase) {
  for (const std::string& point : {"protect.capture@6", "protect.l2.send@6", "train.backward@6",
                                   "comm.gloo.ring_segment@25", "protect.update@6"}) {
    SCOPED_TRACE(point);
    Run run = Start("slot-" + point, 4, 1, "2:" + point + ":hang", 1);
    ExpectIdentical(run, 4, "slot lost at " + point);
    EXPECT_NE(run.output.find("role=spare-activated rank=2"), std::string::npos) << run.output;
  }
}

// RTFT_COMM_GLOO_PAIRS=ring (docs/comm.md, "Which pairs connect"): each communicator connects
// its ring neighbours when it is made and every other pair at its first message. A lost slot and
// a crash in the middle of a collective end with the bits of the run that connected every pair.
TEST_F(ProtectJobTest, RingPairsEndWithTheBitsOfTheFullMeshThroughALostSlotAndACrash) {
  const std::string mesh = Reference(4);
  ASSERT_FALSE(mesh.empty());
  env_ = {
      {"RTFT_COMM_GLOO_PAIRS", "ring"}, {"RTFT_LOG_LEVEL", "debug"}, {"RTFT_LOG_SUBSYS", "comm"}};
  Run slot = Start("ring-slot", 4, 1, "2:protect.l2.send@6:hang", 1);
  ExpectIdentical(slot, 4, "ring pairs, slot lost");
  EXPECT_NE(slot.output.find("role=spare-activated rank=2"), std::string::npos) << slot.output;
  EXPECT_NE(slot.output.find("connected 2 of 3 pairs at creation (pairs ring"), std::string::npos)
      << slot.output;
  EXPECT_EQ(slot.output.find("pairs at creation (pairs all)"), std::string::npos) << slot.output;
  Run crash = Start("ring-crash", 4, 1, "1:comm.gloo.ring_segment@25:kill", 0);
  ExpectIdentical(crash, 4, "ring pairs, crash in a collective");
  EXPECT_NE(crash.output.find("role=restarted"), std::string::npos) << crash.output;
}

// CPU seconds `pid` has used so far (every thread), or -1 once it is gone.
double CpuSecondsOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  // Fields 3.. of stat(5): utime and stime are the 14th and 15th.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return double(utime + stime) / sysconf(_SC_CLK_TCK);
}

// While a rank hangs, everything that waits for it waits asleep: its peers inside their next
// collective, their agents, the coordinator, the standby and the spare. A thread that spun
// (polling a flag, a CUDA stream or the store) would use most of a core in every second; here a
// second comes, within the deadline, in which no process of the job used a tenth of it
// (heartbeats and watchdogs included). A slower machine only lowers the figures. Nor does a CPU
// trainer carry cuBLAS, which made every restarted process start 0.4 s later.
TEST_F(ProtectJobTest, NothingSpinsWhileItWaitsForAHungRank) {
  std::string offenders = "no window was measured", with_cublas;
  size_t processes = 0;
  int trainers = 0;
  Start("hang-no-spin", 3, 1, "1:protect.update@6:hang", 0, {"--steps", "1000"}, {}, nullptr,
        [&](Job& job) {
          const std::string dir = root_ + "/hang-no-spin";
          EXPECT_TRUE(WaitFor(
              [&] {
                std::ifstream in(dir + "/faults.log");
                std::string word;
                while (in >> word)
                  if (word == "slot=1") return true;
                return false;
              },
              seconds(60)))
              << job.Output();
          // Windows of a second until one finds every process idle (the others reach the
          // collective that waits for the hung rank first).
          const auto deadline = std::chrono::steady_clock::now() + seconds(30);
          while (std::chrono::steady_clock::now() < deadline) {
            const auto begin = std::chrono::steady_clock::now();
            std::map<pid_t, std::pair<std::string, double>> cpu;
            for (const ProcInfo& p : JobProcesses(dir)) cpu[p.pid] = {p.comm, CpuSecondsOf(p.pid)};
            std::this_thread::sleep_for(seconds(1));
            const double window =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
            offenders.clear();
            for (const auto& [pid, was] : cpu) {
              const double now = CpuSecondsOf(pid);
              if (was.second < 0 || now < 0 || now - was.second <= 0.1 * window) continue;
              offenders += "\n  pid " + std::to_string(pid) + " (" + was.first +
                           "): " + std::to_string(now - was.second) + " s of CPU in " +
                           std::to_string(window) + " s";
            }
            processes = cpu.size();
            if (offenders.empty()) break;
          }
          // A CPU trainer has not loaded cuBLAS (rtft-train's CUDA model is a module of its own:
          // its libraries' start-up alone delayed every restarted process by 0.4-0.55 s).
          for (const ProcInfo& p : JobProcesses(dir)) {
            if (p.comm.rfind("rtft-train", 0) != 0) continue;
            ++trainers;
            std::ifstream maps("/proc/" + std::to_string(p.pid) + "/maps");
            std::string line;
            while (std::getline(maps, line))
              if (line.find("libcublas") != std::string::npos) with_cublas += " " + line;
          }
          for (const ProcInfo& p : JobProcesses(dir)) kill(p.pid, SIGKILL);
        });
  EXPECT_EQ(trainers, 4) << "three ranks and the spare";
  EXPECT_TRUE(with_cublas.empty()) << with_cublas;
  // mpirun, 4 agents, their keepers and applications.
  EXPECT_GE(processes, 9u);
  EXPECT_TRUE(offenders.empty()) << "busy in every window up to the deadline:" << offenders;
}

TEST_F(ProtectJobTest, AFailureDuringRecoveryRestartsRecoveryInTheNextEpoch) {
  // Rank 2 crashes in step 5; rank 1 crashes in the middle of that recovery, then rank 3 in the
  // next one, after the epoch's communicators were built.
  Run run = Start("during-recovery", 4, 1,
                  "2:protect.update@6:kill,1:protect.recover@1:kill,3:protect.transfer@1:kill", 0);
  ExpectIdentical(run, 4, "failures during recovery");
}

TEST_F(ProtectJobTest, ASlotLostWhileProtectionIsPausedRollsBackToTheLastProtectedStep) {
  // Blocks of 3 steps, protected and paused in turn (what rtft-bench protect measures): steps 6
  // to 8 are protected, 9 to 11 paused. Rank 2's slot is lost in step 10, so every rank goes back
  // to step 8, the newest snapshot, and runs two steps again; the digest is the failure-free
  // run's.
  Run run = Start("paused", 4, 1, "2:protect.update@11:hang", 1, {"--protect-blocks", "3"});
  ExpectIdentical(run, 4, "slot lost while paused");
  EXPECT_NE(run.output.find("role=spare-activated rank=2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" step=8 world=4 source=l1"), std::string::npos) << run.output;
}

TEST_F(ProtectJobTest, TwoSlotsLostThatAreNotNeighboursAreBothReplaced) {
  // Ranks 1 and 3 of 4 hang in the same step; their slots are lost together. Each one's replica
  // is on a survivor (2 and 0).
  Run run = Start("two-slots", 4, 2, "1:protect.update@6:hang,3:protect.update@6:hang", 2);
  ExpectIdentical(run, 4, "two slots lost");
}

TEST_F(ProtectJobTest, NeighboursLostTogetherFallBackToTheNewestL3Checkpoint) {
  // Ranks 1 and 2 hang in step 8 and their slots are lost: rank 1's replica was on rank 2. Every
  // rank restores the L3 checkpoint of step 5 and the run ends with the failure-free digest.
  const std::string ckpt = root_ + "/l3-neighbours";
  // Killed once step 5's version is committed (its files are written while the ranks hang).
  Run run =
      Start("neighbours", 4, 2, "1:protect.update@9:hang,2:protect.update@9:hang", 2,
            {"--l3-every", "5", "--ckpt-dir", ckpt}, {}, [&] { return CommittedAtLeast(ckpt, 5); });
  ExpectIdentical(run, 4, "neighbours lost, L3 fallback");
  EXPECT_NE(run.output.find("source=l3"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("restored step 5 from the L3 checkpoint"), std::string::npos)
      << run.output;
}

TEST_F(ProtectJobTest, AFailureWhileAnL3VersionIsWrittenLeavesTheNextVersionsWhole) {
  // Rank 2 fails in the flush of its L3 file of step 10 (crashed: restarted in place; or its
  // slot lost: a spare): the version of step 10 never completes; its commit is abandoned with
  // the epoch. The run ends identical, and the next version (step 15) is whole: a job started
  // from it ends identical too.
  for (const auto& [action, lose] :
       std::vector<std::pair<std::string, int>>{{"kill", 0}, {"hang", 1}}) {
    SCOPED_TRACE(action);
    const std::string ckpt = root_ + "/l3-flush-" + action;
    Run run = Start("l3-flush-" + action, 4, 1, "2:ckpt.flush@2:" + action, lose,
                    {"--l3-every", "5", "--ckpt-dir", ckpt});
    ExpectIdentical(run, 4, "failure in an L3 flush (" + action + ")");
    Run again = Start("l3-flush-again-" + action, 4, 0, "", 0, {"--ckpt-dir", ckpt});
    EXPECT_NE(again.output.find("restored step 15 from the L3 checkpoint"), std::string::npos)
        << again.output;
    ASSERT_EQ(again.digests.size(), 4u) << again.output;
    for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(4)) << rank;
  }
}

TEST_F(ProtectJobTest, NeighboursLostWithoutL3EndTheJobWithAClearError) {
  Run run = Start("neighbours-no-l3", 4, 2, "1:protect.update@9:hang,2:protect.update@9:hang", 2);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("rank 1's state of step"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("no L3 checkpoint directory to fall back to"), std::string::npos)
      << run.output;
}

TEST_F(ProtectJobTest, SparesExhaustedCheckpointAndExitThenTheRelaunchEndsIdentical) {
  // No spare: rank 2's slot is lost in step 8; under checkpoint-and-exit the survivors write one
  // complete version (rank 3 writes rank 2's file from its replica) and the job exits 0. Started
  // again, it resumes there and ends with the failure-free digest.
  const std::string ckpt = root_ + "/l3-exit";
  Run run = Start("exhausted-checkpoint", 4, 0, "2:protect.update@9:hang", 1, {"--ckpt-dir", ckpt},
                  {"--on-spares-exhausted", "checkpoint-and-exit"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("checkpoint-and-exit: step 8 written"), std::string::npos)
      << run.output;
  Run again = Start("exhausted-relaunch", 4, 0, "", 0, {"--ckpt-dir", ckpt});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("restored step 8 from the L3 checkpoint"), std::string::npos)
      << again.output;
  ASSERT_EQ(again.digests.size(), 4u) << again.output;
  for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(4)) << rank;
}

TEST_F(ProtectJobTest, SparesExhaustedWithRankZeroLostTheSurvivorsAgreeThroughRankOne) {
  // Slot 0 (rank 0, the primary coordinator's) is the one lost: the standby takes over, and the
  // survivors' agreement goes through the lowest surviving rank (docs/protect.md, "Spares
  // exhausted"); rank 1 writes rank 0's file from its replica. The relaunch ends identical, and
  // the job ends with its exit code although the new standby's slot left with its application
  // (the last exits go out without the standby's acknowledgement: in 2 runs of 8 before, the
  // primary stepped down at the end and the job had no exit code).
  const std::string ckpt = root_ + "/l3-exit-0";
  Run run = Start("exhausted-rank0", 4, 0, "0:protect.update@9:hang", 1, {"--ckpt-dir", ckpt},
                  {"--on-spares-exhausted", "checkpoint-and-exit"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("takes over from slot 0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("checkpoint-and-exit: step 8 written"), std::string::npos)
      << run.output;
  Run again = Start("exhausted-rank0-relaunch", 4, 0, "", 0, {"--ckpt-dir", ckpt});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("restored step 8 from the L3 checkpoint"), std::string::npos)
      << again.output;
  ASSERT_EQ(again.digests.size(), 4u) << again.output;
  for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(4)) << rank;
}

TEST_F(ProtectJobTest, SparesExhaustedUnderFailEndsTheJobWithAnError) {
  Run fail = Start("exhausted-fail", 4, 0, "2:protect.update@9:hang", 1, {},
                   {"--on-spares-exhausted", "fail"});
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_TRUE(fail.digests.empty()) << fail.output;
}

TEST_F(ProtectJobTest, SparesExhaustedUnderShrinkGoOnWithFewerRanksAsARunToldToShrink) {
  // No spare: a slot is lost and the three survivors go on, renumbered, the optimizer shards
  // redistributed from their snapshots and the lost rank's replica.
  for (const auto& [lost, point] : std::vector<std::pair<int, std::string>>{
           {2, "protect.update@9"}, {3, "comm.gloo.ring_segment@40"}}) {
    SCOPED_TRACE(point);
    const std::string name = "shrink-" + std::to_string(lost);
    Run run = Start(name, 4, 0, std::to_string(lost) + ":" + point + ":hang", 1, {},
                    {"--on-spares-exhausted", "shrink"});
    ExpectShrunkLikeARunToldToShrink(run, name);
  }
}

TEST_F(ProtectJobTest, AnOffloadOptimizersStateSurvivesALostSlotACrashAndAShrink) {
  // rtft-train --offload: each rank's shard updated by rt-ft's OffloadOptimizer, its master
  // weights and moments protected through the optimizer's state provider. The spare receives its
  // rank's optimizer state from the ring neighbour; the crashed process its own from L1; in a
  // shrink every survivor creates a new optimizer for its new shard (ResizeState) and gets the
  // rows of the old shards.
  const std::vector<std::string> offload = {"--offload"};
  Run lost = Start("offload-slot", 4, 1, "2:protect.update@6:hang", 1, offload);
  ExpectIdentical(lost, 4, "offload, slot lost", offload);
  Run crash = Start("offload-crash", 4, 1, "1:train.backward@7:kill", 0, offload);
  ExpectIdentical(crash, 4, "offload, crash", offload);
  Run shrink = Start("offload-shrink", 4, 0, "3:protect.update@9:hang", 1, offload,
                     {"--on-spares-exhausted", "shrink"});
  ExpectShrunkLikeARunToldToShrink(shrink, "offload-shrink", offload);
}

TEST_F(ProtectJobTest, AProcessCrashedDuringAShrinkTakesPartInItFromItsOwnSnapshot) {
  // Rank 2's slot is lost (no spare); in the middle of the shrink that follows, rank 1's process
  // crashes and is restarted on its slot. Its snapshot is still laid out for the old world: it is
  // kept, and the shrink completes from L1 and L2 (no L3 here), identical to a run told to shrink.
  const std::string name = "shrink-crash";
  Run run = Start(name, 4, 0, "2:protect.update@9:hang,1:protect.transfer@1:kill", 1, {},
                  {"--on-spares-exhausted", "shrink"});
  EXPECT_NE(run.output.find("role=restarted rank=1 world=3"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("kept for the shrink"), std::string::npos) << run.output;
  ExpectShrunkLikeARunToldToShrink(run, name);
}

TEST_F(ProtectJobTest, AShrinkThatLostNeighboursFallsBackToL3WithFewerRanks) {
  // Ranks 1 and 2 are lost together without a spare: rank 1's replica was on rank 2. The two
  // survivors restore the L3 version of step 5, resharded for two ranks, and end as a run of
  // four ranks to step 5 and of two from there.
  const std::string ckpt = root_ + "/shrink-l3";
  Run run = Start("shrink-l3", 4, 0, "1:protect.update@9:hang,2:protect.update@9:hang", 2,
                  {"--l3-every", "5", "--ckpt-dir", ckpt}, {"--on-spares-exhausted", "shrink"},
                  [&] { return CommittedAtLeast(ckpt, 5); });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 2u) << run.output;
  EXPECT_NE(run.output.find("restored step 5 from the L3 checkpoint"), std::string::npos)
      << run.output;
  const std::string ref = root_ + "/shrink-l3-reference";
  Run before =
      Start("shrink-l3-ref-4", 4, 0, "", 0, {"--steps", "6", "--l3-every", "5", "--ckpt-dir", ref});
  EXPECT_EQ(before.exit_code, 0) << before.output;
  Run after = Start("shrink-l3-ref-2", 2, 0, "", 0, {"--ckpt-dir", ref});
  ASSERT_EQ(after.digests.size(), 2u) << after.output;
  for (const auto& [rank, digest] : run.digests)
    EXPECT_EQ(digest, after.digests.begin()->second) << "rank " << rank;
}

}  // namespace
}  // namespace rtft::launch::test
