// Hangs that heartbeats miss, end to end (docs/protect.md, "Hangs"): `mpirun --enable-recovery
// dp-launch --spares 1 -- rtft-train` with a rank that stops making progress while its agent is
// fine: blocked inside a collective, blocked in its update, SIGSTOPped, a spare that hangs
// in its first step, and a rank that never joins a recovery's agreement. The coordinator's hang
// detector, with its default settings, names the rank and has its agent kill and restart it; every
// run ends with the digest of the run without the hang, bit for bit. And a long clean run on a
// loaded machine raises no alarm.
#include "protect/jobs/train_job.h"

#include <atomic>
#include <thread>

namespace rtft::launch::test {
namespace {

// A small model and enough steps that the coordinator knows the median step before the hang.
const std::vector<std::string> kTrain = {"--steps", "300", "--hidden",    "192",
                                         "--batch", "8",   "--log-every", "1000"};

class HangJobTest : public TrainJobTest {
 protected:
  HangJobTest() : TrainJobTest(kTrain, 1000) {
    // The detector's defaults, said out loud: a job whose faults hang a rank otherwise runs
    // without it (launch_job.h, HangsARank).
    env_["RTFT_HANG_K"] = "10";
  }

  // The run ended like the run without the hang, after the detector restarted `rank`'s
  // application on `slot` for the reason `sign`.
  void ExpectRestartedForAHang(const Run& run, int rank, int slot, const std::string& sign) {
    ExpectIdentical(run, 3, sign);
    const std::string verdict =
        "hang: rank " + std::to_string(rank) + " on slot " + std::to_string(slot) + " ";
    const size_t at = run.output.find(verdict);
    ASSERT_NE(at, std::string::npos) << run.output;
    const std::string line = run.output.substr(at, run.output.find('\n', at) - at);
    EXPECT_NE(line.find(sign), std::string::npos) << line;
    EXPECT_NE(run.output.find("slot " + std::to_string(slot) + " (rank " + std::to_string(rank) +
                              "): hang, restart 1/"),
              std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("role=restarted rank=" + std::to_string(rank)), std::string::npos)
        << run.output;
  }
};

TEST_F(HangJobTest, ARankBlockedInsideACollectiveIsRestarted) {
  // A watched segment: the plain ring_segment counts the replicator's cross-check too, on its
  // own thread, and its 1500th landed there (the training thread then waited in its update) once
  // the machine was busier.
  Run run = Start("in-collective", 3, 1, "1:comm.gloo.watched_segment@1200:hang", 0);
  ExpectRestartedForAHang(run, 1, 1, "waiting on no peer");
}

TEST_F(HangJobTest, ARankBlockedInItsUpdateIsRestarted) {
  Run run = Start("in-update", 3, 1, "1:protect.update@150:hang", 0);
  ExpectRestartedForAHang(run, 1, 1, "outside any collective");
}

TEST_F(HangJobTest, AStoppedApplicationIsRestarted) {
  Run run = Start("stopped", 3, 1, "2:protect.update@150:stop", 0);
  ExpectRestartedForAHang(run, 2, 2, "stopped?");
}

// Slot 1 is lost at step 100; the spare (slot 3) takes rank 1 and hangs in its first update.
// After a recovery the detector knows no step time yet and waits the first step's bound
// (RTFT_HANG_FIRST_STEP_S, 60 s by default: 5 s here to keep the suite short).
TEST_F(HangJobTest, ASpareThatHangsInItsFirstStepIsRestarted) {
  env_["RTFT_FAULT"] = "1/protect.update@100:hang,3/protect.update@1:hang";
  env_["RTFT_HANG_FIRST_STEP_S"] = "5";
  Run run = Start("spare-first-step", 3, 1, "", 1);
  env_.erase("RTFT_FAULT");
  env_.erase("RTFT_HANG_FIRST_STEP_S");
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
  ExpectRestartedForAHang(run, 1, 3, "the first step's bound");
}

// Rank 1 hangs as the job starts, before the first epoch's communicators (`protect.start`), where
// the others wait for it. The detector (first-step bound 5 s here) names it outside any
// collective; restarted, it finds the others in the next epoch, and as no rank has a snapshot yet
// the job starts again at step 0 (docs/protect.md, "Lost before the first snapshot"), ending with
// the failure-free digest; nobody ends at the communicators' deadline.
TEST_F(HangJobTest, ARankThatHangsAsTheJobStartsIsRestarted) {
  env_["RTFT_HANG_FIRST_STEP_S"] = "5";
  Run run = Start("at-start", 3, 1, "1:protect.start:hang", 0);
  env_.erase("RTFT_HANG_FIRST_STEP_S");
  ExpectRestartedForAHang(run, 1, 1, "outside any collective");
  EXPECT_NE(run.output.find(" step=0 world=3 source=start"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("hang: rank 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("DEADLINE_EXCEEDED"), std::string::npos) << run.output;
}

// Slot 2 is killed at step 100; rank 1 hangs as it begins the recovery and never joins its
// agreement, where ranks 0 and 2 wait. The coordinator's gather fails rank 1 as hung once a
// member waited past its own deadline (RTFT_COMM_CREATE_TIMEOUT_MS, 15 s here); the others go on
// to the next epoch's recovery instead of failing with the gather's error, and nobody waiting in
// the gather is taken for hung (the detector's first-step bound, 60 s, is not reached).
TEST_F(HangJobTest, ARankThatNeverJoinsTheRecoveryIsFailedByTheGather) {
  env_["RTFT_FAULT"] = "2/protect.update@100,1/protect.recover:hang";
  env_["RTFT_COMM_CREATE_TIMEOUT_MS"] = "15000";
  Run run = Start("absent-from-gather", 3, 1, "", 0);
  env_.erase("RTFT_FAULT");
  env_.erase("RTFT_COMM_CREATE_TIMEOUT_MS");
  ExpectRestartedForAHang(run, 1, 1, "gather 'protect/e2/agree' of epoch 2: 2 of 3 members");
  EXPECT_NE(run.output.find("(rank(s) 1 absent)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("DEADLINE_EXCEEDED"), std::string::npos) << run.output;
}

// The same with the detector's first-step bound shorter than the gather's deadline: the detector
// names rank 1 (outside any collective), never the ranks that wait for it in the gather.
TEST_F(HangJobTest, ARankThatNeverJoinsTheRecoveryIsFoundByTheDetector) {
  env_["RTFT_FAULT"] = "2/protect.update@100,1/protect.recover:hang";
  env_["RTFT_HANG_FIRST_STEP_S"] = "10";
  Run run = Start("absent-detected", 3, 1, "", 0);
  env_.erase("RTFT_FAULT");
  env_.erase("RTFT_HANG_FIRST_STEP_S");
  ExpectRestartedForAHang(run, 1, 1, "outside any collective");
  EXPECT_EQ(run.output.find("hang: rank 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("DEADLINE_EXCEEDED"), std::string::npos) << run.output;
}

// 1000 steps with both cores of the machine kept busy by two spinning threads beside the job:
// no rank is ever found hung, nothing recovers.
TEST_F(HangJobTest, NoAlarmInALongCleanRunOnABusyMachine) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> burners;
  for (int i = 0; i < 2; ++i)
    burners.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  Run run = Start("busy", 3, 1, "", 0, {"--steps", "1000"});
  stop = true;
  for (auto& t : burners) t.join();
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("hang: "), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("epoch 2"), std::string::npos) << run.output;
  ASSERT_EQ(run.digests.size(), 3u) << run.output;
  std::set<std::string> distinct;
  for (const auto& [rank, digest] : run.digests) distinct.insert(digest);
  EXPECT_EQ(distinct.size(), 1u) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
