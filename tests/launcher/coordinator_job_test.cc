// The job survives the loss of the coordinator's slot (docs/launcher.md "Where the coordinator
// runs"), tested with rtft-train under real `mpirun --enable-recovery dp-launch`, real SIGKILL and
// SIGSTOP, and fault points at named phases of a step: every run that finishes ends with the
// digest of the same run without a failure, on every rank. This file: the dedicated slot, and
// slot 0 (the primary's) lost or stopped at each phase of a step and during a recovery, with and
// without its application; standby_job_test.cc: the rest of the standby's cases.
#include <signal.h>

#include <gtest/gtest.h>

#include "launcher/train_run.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kPhases = {"protect.capture@6", "protect.l2.send@6",
                                          "train.backward@6", "comm.gloo.ring_segment@25",
                                          "protect.update@6"};

class CoordinatorJobTest : public TrainRunTest {
 protected:
  // Rank 0 (slot 0, the primary's) stands still at `point`; then `act` happens to its slot.
  TrainRun SlotZeroAt(const std::string& name, const std::string& point,
                      std::function<void(Job&, const std::string&)> act,
                      const std::string& faults_before = "") {
    TrainSpec spec;
    spec.faults = faults_before + "0:" + point + ":hang";
    spec.during = [point, act](Job& job, const std::string& dir) {
      ASSERT_TRUE(WaitFault(dir, 0, point)) << job.Output();
      act(job, dir);
    };
    return Start(name, spec);
  }
  // The standby (slot 1) took over, and slot 0's rank 0 went to the spare (slot 4).
  void ExpectTakeOver(const TrainRun& run, const std::string& what) {
    ExpectIdentical(run, 4, what);
    EXPECT_EQ(run.Count("slot 1 takes over from slot 0 (generation 2)"), 1u) << what << "\n"
                                                                             << run.output;
    EXPECT_NE(run.output.find("role=spare-activated rank=0"), std::string::npos) << run.output;
    EXPECT_EQ(run.Count("job exit code 0 (said by slot 1, the primary coordinator)"), 1u)
        << run.output;
  }
};

// --coordinator-slot dedicated: slot 0 runs only the coordinator; ranks 0..3 are slots 1..4.
TEST_F(CoordinatorJobTest, DedicatedCoordinatorRunsNoApplicationAndEndsWithTheDigest) {
  TrainSpec spec;
  spec.dedicated = true;
  spec.dp_extra = {"--log-level", "info"};
  TrainRun run = Start("dedicated-clean", spec);
  ExpectIdentical(run, 4, "dedicated coordinator, no failure");
  EXPECT_EQ(run.Count("slot 0 runs only the coordinator"), 1u) << run.output;
  EXPECT_EQ(run.Count("slot 0: started"), 0u) << "slot 0 started an application\n" << run.output;
  for (int slot = 1; slot <= 4; ++slot)
    EXPECT_EQ(run.Count("slot " + std::to_string(slot) + ": started"), 1u) << run.output;
}

// Losing the slot that holds rank 0 is an ordinary slot loss: a spare takes the rank.
TEST_F(CoordinatorJobTest, DedicatedCoordinatorLosingAnyOtherSlotIsAnOrdinarySlotLoss) {
  for (const std::string& point : {"protect.update@6", "train.backward@6"}) {
    SCOPED_TRACE(point);
    TrainSpec spec;
    spec.dedicated = true;
    spec.faults = "0:" + point + ":hang";
    spec.during = [](Job& job, const std::string& dir) {
      EXPECT_EQ(LoseFiredSlots(job, dir, 1), std::set<int>{1});
    };
    TrainRun run = Start("dedicated-lost-" + point, spec);
    ExpectIdentical(run, 4, "dedicated coordinator, slot 1 lost at " + point);
    EXPECT_GE(run.recoveries, 3) << run.output;
    EXPECT_NE(run.output.find("role=spare-activated rank=0"), std::string::npos) << run.output;
  }
}

// Slot 0's dp-launch SIGKILLed (its application dies with it, in its PID namespace).
TEST_F(CoordinatorJobTest, SlotZeroKilledAtEveryPhaseOfAStep) {
  for (const std::string& point : kPhases) {
    SCOPED_TRACE(point);
    TrainRun run = SlotZeroAt("kill-agent-" + point, point, [](Job&, const std::string& dir) {
      EXPECT_EQ(SignalSlot(dir, 0, SIGKILL, /*agent_only=*/true), 1u);
    });
    ExpectTakeOver(run, "slot 0's agent SIGKILLed at " + point);
  }
}

// The whole slot at once (the node): its dp-launch, keeper and application SIGKILLed.
TEST_F(CoordinatorJobTest, SlotZeroKilledWithItsApplicationAtEveryPhase) {
  for (const std::string& point : kPhases) {
    SCOPED_TRACE(point);
    TrainRun run = SlotZeroAt("kill-slot-" + point, point, [](Job&, const std::string& dir) {
      // Its dp-launch, keeper and application (some may be gone by the time their turn comes).
      EXPECT_GE(SlotProcesses(dir, 0, /*agent_only=*/false).size(), 3u);
      EXPECT_GE(SignalSlot(dir, 0, SIGKILL, /*agent_only=*/false), 1u);
    });
    ExpectTakeOver(run, "slot 0 SIGKILLed with its application at " + point);
  }
}

// SIGSTOP of slot 0's dp-launch: its keeper ends the tree and the agent once the heartbeat
// timeout passed; of the whole slot: the other agents on its host SIGKILL the retired dp-launch.
TEST_F(CoordinatorJobTest, SlotZeroStoppedWithAndWithoutItsApplicationAtEveryPhase) {
  for (bool agent_only : {true, false}) {
    for (const std::string& point : kPhases) {
      SCOPED_TRACE(point + (agent_only ? " agent" : " slot"));
      TrainRun run = SlotZeroAt(std::string(agent_only ? "stop-agent-" : "stop-slot-") + point,
                                point, [agent_only](Job&, const std::string& dir) {
                                  EXPECT_GE(SignalSlot(dir, 0, SIGSTOP, agent_only), 1u);
                                });
      ExpectTakeOver(run, std::string("slot 0 SIGSTOPped at ") + point);
    }
  }
}

// Rank 2 crashes in step 5; slot 0 is lost in the middle of that recovery, before it published
// what it holds: the standby takes over and recovery starts again in the next epoch.
TEST_F(CoordinatorJobTest, SlotZeroLostDuringARecovery) {
  for (int sig : {SIGKILL, SIGSTOP}) {
    SCOPED_TRACE(sig);
    TrainRun run = SlotZeroAt(
        "during-recovery-" + std::to_string(sig), "protect.recover@1",
        [sig](Job&, const std::string& dir) { EXPECT_GE(SignalSlot(dir, 0, sig, true), 1u); },
        "2:protect.update@6:kill,");
    ExpectTakeOver(run, "slot 0 lost during a recovery");
    EXPECT_NE(run.output.find("role=restarted rank=2"), std::string::npos) << run.output;
  }
}

}  // namespace
}  // namespace rtft::launch::test
