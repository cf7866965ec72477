// Where the coordinator runs (docs/launcher.md "Where the coordinator runs"), under real mpirun
// --enable-recovery with the launcher test application: --coordinator-slot dedicated gives slot 0
// to the coordinator alone (no agent, no application, no rank), every other slot's loss is an
// ordinary one, and slot 0's loss (the launcher's node) ends the job with exit code 1. With the
// coordinator shared, a standby in another slot takes over when slot 0 is SIGKILLed or stopped;
// losing the standby alone is an ordinary slot loss; losing both ends the job with exit code 1;
// a minority of agents that lost the primary (a partition) makes no takeover.
#include <signal.h>

#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

class CoordinatorSlotTest : public JobFixture {
 protected:
  JobSpec Shared(int slots, int spares, int steps = 30) {
    JobSpec spec = BaseSpec(slots, spares, steps);
    spec.dp_args.insert(spec.dp_args.end(), {"--log-level", "info"});
    return spec;
  }
  // Rank 0's agent, and the slot it runs on (slot 0 at the start).
  pid_t RankZeroAgent(int* slot = nullptr) {
    pid_t app = 0, agent = 0;
    EXPECT_TRUE(job_->FindRank(0, &app, &agent, slot)) << job_->Dump();
    return agent;
  }
  size_t Count(const std::string& text) {
    const std::string out = job_->Output();
    size_t n = 0;
    for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++n;
    return n;
  }
  JobSpec Dedicated(int slots, int spares, int steps = 30) {
    JobSpec spec = BaseSpec(slots, spares, steps);
    spec.dp_args.insert(spec.dp_args.end(), {"--coordinator-slot", "dedicated"});
    return spec;
  }
  int Finish() {
    auto rc = WaitLauncher();
    if (rc) EXPECT_EQ(*rc, 0) << job_->Dump();
    return job_->JobExitCode();
  }
};

TEST_F(CoordinatorSlotTest, DedicatedSlotZeroRunsOnlyTheCoordinator) {
  job_->Start(Dedicated(4, 1));
  WaitStep(1, 2);
  // While the job runs, no process of slot 0 but its dp-launch: no keeper, no application.
  std::set<std::string> slot0;
  for (const ProcInfo& p : JobProcesses(dir_))
    if (p.Env("RTFT_SLOT") == "0" || p.Env("OMPI_COMM_WORLD_RANK") == "0") slot0.insert(p.comm);
  EXPECT_EQ(slot0, std::set<std::string>{"dp-launch"}) << job_->Dump();
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_TRUE(ReadSlotLog(dir_, 0).empty()) << job_->Dump();
  for (int slot = 1; slot <= 2; ++slot) {
    auto starts = Starts(slot);
    ASSERT_EQ(starts.size(), 1u) << job_->Dump();
    EXPECT_EQ(starts[0].Get("role"), "initial");
    EXPECT_EQ(starts[0].Int("rank"), slot - 1) << "ranks start at slot 1";
    EXPECT_EQ(starts[0].Int("world"), 2);
  }
  EXPECT_EQ(LinesOf(dir_, 3, "launched").size(), 1u) << "the spare started warm\n" << job_->Dump();
  EXPECT_TRUE(Starts(3).empty()) << job_->Dump();
}

TEST_F(CoordinatorSlotTest, DedicatedLosingTheSlotOfRankZeroActivatesTheSpare) {
  job_->Start(Dedicated(4, 1));
  WaitStep(0, 3);
  pid_t app, agent;
  int slot = -1;
  ASSERT_TRUE(job_->FindRank(0, &app, &agent, &slot));
  EXPECT_EQ(slot, 1);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(3);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 0);
  EXPECT_EQ(starts[0].Int("epoch"), 2);
  EXPECT_EQ(Events(2).at(0).Get("failed"), "0") << job_->Dump();
}

// The coordinator's own slot is the launcher's node: no launcher survives losing it. The other
// slots end once they lost the coordinator, and the first of them writes exit code 1.
TEST_F(CoordinatorSlotTest, DedicatedCoordinatorLostEndsTheJobWithOne) {
  JobSpec spec = Dedicated(3, 0, 200);
  spec.env["RTFT_CTRL_COORDINATOR_TIMEOUT_MS"] = "1500";
  job_->Start(spec);
  WaitStep(0, 2);
  const pid_t coordinator = job_->AgentOf(0);
  ASSERT_GT(coordinator, 0);
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 1) << job_->Dump();
  EXPECT_NE(job_->Output().find("job exit code 1 (said by slot"), std::string::npos)
      << job_->Output();
}

TEST_F(CoordinatorSlotTest, DedicatedWithoutAnActiveSlotIsBadUsage) {
  job_->Start(Dedicated(3, 2));
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 2) << job_->Dump();
  EXPECT_NE(job_->Output().find("slot 0 runs only the coordinator"), std::string::npos)
      << job_->Output();
}

TEST_F(CoordinatorSlotTest, UnknownCoordinatorSlotIsBadUsage) {
  JobSpec spec = BaseSpec(2, 0, 2);
  spec.dp_args.insert(spec.dp_args.end(), {"--coordinator-slot", "elsewhere"});
  job_->Start(spec);
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 2) << job_->Dump();
  EXPECT_NE(job_->Output().find("--coordinator-slot 'elsewhere'"), std::string::npos)
      << job_->Output();
}

TEST_F(CoordinatorSlotTest, TheStandbyTakesOverWhenSlotZeroIsKilled) {
  job_->Start(Shared(5, 1));
  WaitStep(0, 3);
  ASSERT_TRUE(WaitFor([&] { return Count("becomes the standby") == 1; }, seconds(10)));
  int slot = -1;
  const pid_t agent = RankZeroAgent(&slot);
  ASSERT_EQ(slot, 0);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Count("slot 1 takes over from slot 0 (generation 2)"), 1u) << job_->Output();
  // Slot 0's rank went to the spare, as for any other slot; the others heard of it.
  auto starts = Starts(4);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 0);
  EXPECT_EQ(starts[0].Int("epoch"), 2);
  EXPECT_EQ(Events(2).at(0).Get("failed"), "0") << job_->Dump();
  // The new primary's slot wrote the job's exit code; every rank finished.
  EXPECT_EQ(Count("job exit code 0 (said by slot 1, the primary coordinator)"), 1u)
      << job_->Output();
  for (int s = 1; s <= 4; ++s)
    EXPECT_EQ(Last(LinesOf(dir_, s, "exit")).Get("why"), "done") << job_->Dump();
  // It chose a new standby.
  EXPECT_GE(Count("becomes the standby"), 2u) << job_->Output();
}

TEST_F(CoordinatorSlotTest, AStoppedSlotZeroIsReplacedByTheStandby) {
  job_->Start(Shared(4, 1));
  WaitStep(0, 3);
  ASSERT_TRUE(WaitFor([&] { return Count("becomes the standby") == 1; }, seconds(10)));
  pid_t app = 0, agent = 0;
  ASSERT_TRUE(job_->FindRank(0, &app, &agent));
  ASSERT_EQ(kill(agent, SIGSTOP), 0);
  // Its keeper ends the stopped slot; the standby takes over and the spare takes rank 0.
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Count("takes over from slot 0"), 1u) << job_->Output();
  EXPECT_EQ(Starts(3).at(0).Int("rank"), 0) << job_->Dump();
  EXPECT_FALSE(Alive(agent));
  EXPECT_FALSE(Alive(app));
}

TEST_F(CoordinatorSlotTest, LosingTheStandbyAloneIsAnOrdinarySlotLoss) {
  job_->Start(Shared(5, 1));
  WaitStep(1, 3);
  ASSERT_TRUE(WaitFor([&] { return Count("slot 1 (") > 0 && Count("becomes the standby") == 1; },
                      seconds(10)));
  pid_t app = 0, agent = 0;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Count("takes over"), 0u) << job_->Output();
  EXPECT_EQ(Starts(4).at(0).Int("rank"), 1) << job_->Dump();
  EXPECT_EQ(Count("slot 2 (") > 0 && Count("becomes the standby") >= 2, true) << job_->Output();
  EXPECT_EQ(Count("job exit code 0"), 1u) << job_->Output();
}

// Slot 0 retired (its application crashed once too often): its rank goes to the spare, and its
// dp-launch keeps the primary coordinator to the job's end; the agents that fence retired slots
// on this host leave it alone.
TEST_F(CoordinatorSlotTest, ARetiredSlotZeroKeepsThePrimaryCoordinator) {
  JobSpec spec = Shared(4, 1, 40);
  spec.dp_args.insert(spec.dp_args.end(), {"--max-restarts-per-slot", "1"});
  job_->Start(spec);
  WaitStep(0, 3);
  Command(0, "crash");
  ASSERT_TRUE(WaitFor([&] { return Starts(0).size() == 2; }, seconds(20))) << job_->Dump();
  Command(0, "crash");
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Starts(3).at(0).Int("rank"), 0) << job_->Dump();
  EXPECT_EQ(Count("takes over"), 0u) << job_->Output();
  EXPECT_EQ(Count("dp-launch: job exit code 0\n"), 1u) << "slot 0 said it\n" << job_->Output();
}

// Both coordinators lost: the other agents end once no coordinator answered for
// RTFT_CTRL_COORDINATOR_TIMEOUT_MS, and the first writes exit code 1.
TEST_F(CoordinatorSlotTest, LosingSlotZeroAndTheStandbyEndsTheJobWithOne) {
  JobSpec spec = Shared(5, 1, 200);
  spec.env["RTFT_CTRL_COORDINATOR_TIMEOUT_MS"] = "2500";
  job_->Start(spec);
  WaitStep(1, 3);
  ASSERT_TRUE(WaitFor([&] { return Count("becomes the standby") == 1; }, seconds(10)));
  const pid_t zero = job_->AgentOf(0), one = job_->AgentOf(1);
  ASSERT_GT(zero, 0);
  ASSERT_GT(one, 0);
  ASSERT_EQ(kill(zero, SIGKILL), 0);
  ASSERT_EQ(kill(one, SIGKILL), 0);
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 1) << job_->Dump();
  EXPECT_NE(job_->Output().find("did not take over"), std::string::npos) << job_->Output();
  EXPECT_EQ(Count("takes over"), 0u) << job_->Output();
}

// The primary stops hearing slot 3 (the test hook drops its traffic): slot 3 lost the primary
// and votes for the standby, alone. No takeover: the primary declares slot 3 lost and the spare
// takes its rank.
TEST_F(CoordinatorSlotTest, AMinorityThatLostThePrimaryMakesNoTakeover) {
  JobSpec spec = Shared(5, 1);
  const std::string partition = dir_ + "/partition";
  spec.env["RTFT_CTRL_TEST_PARTITION"] = partition;
  job_->Start(spec);
  WaitStep(3, 3);
  ASSERT_TRUE(WaitFor([&] { return Count("becomes the standby") == 1; }, seconds(10)));
  { std::ofstream(partition) << "3\n"; }
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Count("takes over"), 0u) << job_->Output();
  EXPECT_GE(Count("slot 3: the primary (slot 0) silent"), 1u) << job_->Output();
  EXPECT_EQ(Starts(4).at(0).Int("rank"), 3) << job_->Dump();
  EXPECT_EQ(Events(0).at(0).Get("failed"), "3") << job_->Dump();
}

}  // namespace
}  // namespace rtft::launch::test
