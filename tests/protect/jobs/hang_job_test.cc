// Hangs that heartbeats miss, end to end (docs/protect.md, "Hangs"): `mpirun --enable-recovery
// dp-launch --spares 1 -- rtft-train` with a rank that stops making progress while its agent is
// fine: blocked inside a collective, blocked in its update, SIGSTOPped, and a spare that hangs
// in its first step. The coordinator's hang detector, with its default settings, names the rank
// and has its agent kill and restart it; every run ends with the digest of the run without the
// hang, bit for bit. And a long clean run on a loaded machine raises no alarm.
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
  Run run = Start("in-collective", 3, 1, "1:comm.gloo.ring_segment@1500:hang", 0);
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
