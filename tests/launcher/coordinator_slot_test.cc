// Where the coordinator runs (docs/launcher.md "Where the coordinator runs"), under real mpirun
// --enable-recovery with the launcher test application: --coordinator-slot dedicated gives slot 0
// to the coordinator alone (no agent, no application, no rank), every other slot's loss is an
// ordinary one, and slot 0's loss (the launcher's node) ends the job with exit code 1.
#include <signal.h>

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

}  // namespace
}  // namespace rtft::launch::test
