// dp-launch under real mpirun (--enable-recovery), with real processes killed and stopped:
// the roles, ranks, epochs and events each application sees, and the job's exit code.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

// A whole slot lost at once: the agent, then its application. The application dies with its
// agent, so by the second kill it may already be gone (ESRCH); either way both are dead.
void KillSlot(pid_t agent, pid_t app) {
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_TRUE(kill(app, SIGKILL) == 0 || errno == ESRCH) << std::strerror(errno);
}

using std::chrono::milliseconds;
using std::chrono::seconds;

class LaunchTest : public JobFixture {
 protected:
  JobSpec Spec(int slots, int spares, std::vector<std::string> extra = {}) {
    JobSpec spec = BaseSpec(slots, spares, /*steps=*/40);
    spec.dp_args.insert(spec.dp_args.end(), extra.begin(), extra.end());
    return spec;
  }
  // The job's exit code, which slot 0 writes: Open MPI 4.1 under --enable-recovery exits 0
  // whatever happened.
  int Finish() {
    auto rc = WaitLauncher();
    if (rc) EXPECT_EQ(*rc, 0) << job_->Dump();
    return job_->JobExitCode();
  }
};

TEST_F(LaunchTest, CleanRunGivesEveryRankItsRoleAndEndsWithZero) {
  JobSpec spec = Spec(3, 1);
  spec.env["NCCL_PROTO"] = "LL";  // the user's own value is kept
  job_->Start(spec);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  // dp-launch gives the application NCCL's deterministic settings where the user gave none.
  for (int slot = 0; slot < 3; ++slot) {
    auto launched = LinesOf(dir_, slot, "launched");
    ASSERT_FALSE(launched.empty()) << job_->Dump();
    EXPECT_EQ(launched[0].Get("nccl_algo"), "Ring") << slot;
    EXPECT_EQ(launched[0].Get("nccl_proto"), "LL") << slot;
  }
  for (int slot = 0; slot < 2; ++slot) {
    auto starts = Starts(slot);
    ASSERT_EQ(starts.size(), 1u) << job_->Dump();
    EXPECT_EQ(starts[0].Get("role"), "initial");
    EXPECT_EQ(starts[0].Int("rank"), slot);
    EXPECT_EQ(starts[0].Int("world"), 2);
    EXPECT_EQ(starts[0].Int("epoch"), 1);
    EXPECT_EQ(Last(LinesOf(dir_, slot, "exit")).Get("why"), "done");
  }
  // The spare started (warm) but never got a rank.
  EXPECT_EQ(LinesOf(dir_, 2, "launched").size(), 1u) << job_->Dump();
  EXPECT_TRUE(Starts(2).empty()) << job_->Dump();
}

TEST_F(LaunchTest, KilledApplicationRestartsOnItsSlot) {
  job_->Start(Spec(3, 1));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  ASSERT_EQ(kill(app, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Starts(1).size() == 2; }, seconds(30))) << job_->Dump();
  pid_t app2, agent2;
  ASSERT_TRUE(job_->FindRank(1, &app2, &agent2)) << job_->Dump();
  EXPECT_EQ(agent2, agent) << "restarted by the same agent";
  EXPECT_NE(app2, app);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(1);
  ASSERT_EQ(starts.size(), 2u) << job_->Dump();
  EXPECT_EQ(starts[1].Get("role"), "restarted");
  EXPECT_EQ(starts[1].Int("rank"), 1);
  EXPECT_EQ(starts[1].Int("epoch"), 2);
  // The restarted rank resumed from the step it had published in the KV store.
  auto resume = LinesOf(dir_, 1, "resume");
  ASSERT_EQ(resume.size(), 1u);
  EXPECT_EQ(resume[0].Get("kv"), "ok");
  EXPECT_GE(resume[0].Int("step"), 3);
  // Rank 0 heard of the new epoch; the spare was not needed.
  auto events = Events(0);
  ASSERT_FALSE(events.empty()) << job_->Dump();
  EXPECT_EQ(events[0].Int("epoch"), 2);
  EXPECT_EQ(events[0].Get("failed"), "1");
  EXPECT_EQ(events[0].Int("world"), 2);
  EXPECT_TRUE(Starts(2).empty());
}

TEST_F(LaunchTest, AListenerThatThrowsDoesNotEndTheRankOrItsOtherListeners) {
  JobSpec spec = Spec(3, 1);
  spec.env["RTFT_TEST_THROWING_LISTENER"] = "1";
  job_->Start(spec);
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  ASSERT_EQ(kill(app, SIGKILL), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  // Rank 0's throwing listener ran first; its logging listener still heard the event, and it
  // finished its steps.
  auto events = Events(0);
  ASSERT_FALSE(events.empty()) << job_->Dump();
  EXPECT_EQ(events[0].Int("epoch"), 2);
  EXPECT_EQ(Starts(0).size(), 1u) << job_->Dump();
  EXPECT_EQ(Last(LinesOf(dir_, 0, "exit")).Get("why"), "done") << job_->Dump();
}

TEST_F(LaunchTest, LostSlotIsTakenOverByTheSpare) {
  job_->Start(Spec(3, 1));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  KillSlot(agent, app);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(2);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 1);
  EXPECT_EQ(starts[0].Int("epoch"), 2);
  EXPECT_EQ(starts[0].Int("world"), 2);
  auto events = Events(0);
  ASSERT_FALSE(events.empty()) << job_->Dump();
  EXPECT_EQ(events[0].Int("epoch"), 2);
  EXPECT_EQ(events[0].Get("failed"), "1");
}

TEST_F(LaunchTest, StoppedApplicationIsKilledByTheWatchdogAndRestarted) {
  job_->Start(Spec(2, 0, {"--watchdog-s", "1"}));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  ASSERT_EQ(kill(app, SIGSTOP), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(1);
  ASSERT_EQ(starts.size(), 2u) << job_->Dump();
  EXPECT_EQ(starts[1].Get("role"), "restarted");
  EXPECT_EQ(starts[1].Int("epoch"), 2);
  EXPECT_NE(job_->Output().find("no step progress"), std::string::npos) << job_->Output();
}

TEST_F(LaunchTest, StoppedAgentIsDeclaredLostAndReplaced) {
  job_->Start(Spec(3, 1));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  ASSERT_EQ(kill(agent, SIGSTOP), 0);
  // The heartbeat timeout retires the slot; the other agents on this host then kill the stopped
  // one (and with it its application), so the job can end.
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(2);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 1);
  EXPECT_EQ(starts[0].Int("epoch"), 2);
  EXPECT_EQ(Events(0).at(0).Get("failed"), "1");
}

TEST_F(LaunchTest, KilledSpareLeavesTheRanksRunning) {
  job_->Start(Spec(3, 1));
  WaitStep(0, 2);
  pid_t app, agent;
  ASSERT_TRUE(WaitFor([&] { return job_->FindSpare(2, &app, &agent); }, seconds(10)));
  KillSlot(agent, app);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  // A new epoch without failed ranks; nobody restarted.
  auto events = Events(0);
  ASSERT_FALSE(events.empty()) << job_->Dump();
  EXPECT_EQ(events[0].Int("epoch"), 2);
  EXPECT_EQ(events[0].Get("failed"), "-");
  EXPECT_EQ(events[0].Int("world"), 2);
  EXPECT_EQ(Starts(0).size(), 1u);
  EXPECT_EQ(Starts(1).size(), 1u);
}

TEST_F(LaunchTest, TwoSlotsLostAtOnceTakeBothSpares) {
  job_->Start(Spec(5, 2));
  WaitStep(2, 3);
  pid_t app1, agent1, app2, agent2;
  ASSERT_TRUE(job_->FindRank(1, &app1, &agent1));
  ASSERT_TRUE(job_->FindRank(2, &app2, &agent2));
  // The application may already be gone with its agent's tree: KillSlot allows that.
  KillSlot(agent1, app1);
  KillSlot(agent2, app2);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  std::map<long, std::string> taken;  // rank -> role of the spare that took it
  for (int slot : {3, 4}) {
    auto starts = Starts(slot);
    ASSERT_EQ(starts.size(), 1u) << job_->Dump();
    EXPECT_EQ(starts[0].Get("role"), "spare-activated");
    taken[starts[0].Int("rank")] = starts[0].Get("role");
  }
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_TRUE(taken.count(1) && taken.count(2)) << job_->Dump();
  // Rank 0 ends in an epoch where both are replaced.
  auto events = Events(0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(Last(events).Int("world"), 3);
}

TEST_F(LaunchTest, SparesExhaustedShrink) {
  job_->Start(Spec(3, 0, {"--on-spares-exhausted", "shrink"}));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  KillSlot(agent, app);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto e0 = Events(0), e2 = Events(2);
  ASSERT_FALSE(e0.empty() || e2.empty()) << job_->Dump();
  EXPECT_EQ(e0[0].Int("world"), 2);
  EXPECT_EQ(e0[0].Int("rank"), 0);
  EXPECT_EQ(e2[0].Int("world"), 2);
  EXPECT_EQ(e2[0].Int("rank"), 1) << "slot 2's rank 2 becomes rank 1";
  EXPECT_EQ(Last(LinesOf(dir_, 2, "exit")).Get("why"), "done");
}

TEST_F(LaunchTest, SparesExhaustedCheckpointAndExit) {
  job_->Start(Spec(3, 0, {"--on-spares-exhausted", "checkpoint-and-exit"}));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  KillSlot(agent, app);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  for (int slot : {0, 2}) {
    EXPECT_EQ(LinesOf(dir_, slot, "checkpoint").size(), 1u) << job_->Dump();
    EXPECT_EQ(Last(LinesOf(dir_, slot, "exit")).Get("why"), "shutdown");
    EXPECT_LT(job_->LastStep(slot), 39);
  }
}

TEST_F(LaunchTest, SparesExhaustedFail) {
  job_->Start(Spec(3, 0, {"--on-spares-exhausted", "fail"}));
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent));
  KillSlot(agent, app);
  EXPECT_EQ(Finish(), 1) << job_->Dump();
  EXPECT_EQ(Last(Events(0)).Get("shutdown"), "1");
  EXPECT_TRUE(LinesOf(dir_, 0, "checkpoint").empty());
}

TEST_F(LaunchTest, RepeatedCrashesRetireTheSlot) {
  job_->Start(Spec(3, 1, {"--max-restarts-per-slot", "1"}));
  WaitStep(1, 3);
  Command(1, "crash");
  ASSERT_TRUE(WaitFor([&] { return Starts(1).size() == 2; }, seconds(20))) << job_->Dump();
  Command(1, "crash");
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(2);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 1);
  EXPECT_EQ(starts[0].Int("epoch"), 3);
}

TEST_F(LaunchTest, ApplicationExitCodeEndsTheJob) {
  job_->Start(Spec(2, 0));
  WaitStep(1, 2);
  Command(1, "exit 3");
  EXPECT_EQ(Finish(), 3) << job_->Dump();
  EXPECT_NE(job_->Output().find("job exit code 3"), std::string::npos) << job_->Output();
  const auto events = Events(0);
  ASSERT_FALSE(events.empty()) << job_->Dump();
  EXPECT_EQ(Last(events).Get("shutdown"), "1");
}

TEST_F(LaunchTest, WithoutEnableRecoveryWarnsAndPassesTheExitCode) {
  JobSpec spec = Spec(2, 0);
  spec.recovery = false;
  job_->Start(spec);
  WaitStep(1, 2);
  Command(1, "exit 4");
  auto rc = job_->Wait(seconds(60));
  ASSERT_TRUE(rc.has_value()) << job_->Dump();
  EXPECT_EQ(*rc, 4) << job_->Dump();
  EXPECT_NE(job_->Output().find("without --enable-recovery"), std::string::npos) << job_->Output();
}

TEST_F(LaunchTest, AgentWithAnotherJobKeyCannotJoin) {
  const std::string good = dir_ + "/good.key", bad = dir_ + "/bad.key";
  for (const auto& f : {good, bad})
    ASSERT_EQ(std::system((std::string(RTFT_DP_LAUNCH) + " --new-key-file " + f).c_str()), 0);
  JobSpec spec = Spec(4, 1, {"--join-timeout-s", "4"});
  spec.per_slot_args = {{"--job-key-file", good},
                        {"--job-key-file", bad},
                        {"--job-key-file", good},
                        {"--job-key-file", good}};
  job_->Start(spec);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  // Slot 1 never joined: its application never started; the spare took rank 1 once the join
  // deadline passed.
  EXPECT_TRUE(ReadSlotLog(dir_, 1).empty()) << job_->Dump();
  EXPECT_NE(job_->Output().find("could not join"), std::string::npos) << job_->Output();
  auto starts = Starts(3);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Int("rank"), 1);
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
}

// Without a launcher: the runtime is standalone, and dp-launch alone is a one-slot job.
TEST_F(LaunchTest, StandaloneRuntimeIsRankZeroOfOne) {
  const std::string cmd = "env -u RTFT_AGENT_SOCKET RTFT_TEST_DIR=" + dir_ +
                          " RTFT_TEST_STEPS=2 RTFT_TEST_STEP_MS=1 " + RTFT_TEST_APP;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto starts = LinesOf(dir_, 0, "start");
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].Get("role"), "standalone");
  EXPECT_EQ(starts[0].Int("rank"), 0);
  EXPECT_EQ(starts[0].Int("world"), 1);
}

TEST_F(LaunchTest, StandaloneRuntimeUnderALauncherOfSeveralProcessesWarnsOrFails) {
  // Started by mpirun without dp-launch, every process would be a rank 0 of 1.
  const std::string base = "env -u RTFT_AGENT_SOCKET OMPI_COMM_WORLD_SIZE=4 RTFT_TEST_DIR=" + dir_ +
                           " RTFT_TEST_STEPS=1 RTFT_TEST_STEP_MS=1 ";
  const std::string err = dir_ + "/stderr";
  ASSERT_EQ(std::system((base + RTFT_TEST_APP + " 2> " + err).c_str()), 0);
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("OMPI_COMM_WORLD_SIZE=4 says a launcher started several processes"),
            std::string::npos)
      << text.str();
  const int rc = std::system((base + "RTFT_REQUIRE_AGENT=1 " + RTFT_TEST_APP).c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 3);
  std::ifstream log(dir_ + "/slot-0.log");
  std::stringstream lines;
  lines << log.rdbuf();
  EXPECT_NE(lines.str().find("error create FAILED_PRECONDITION: OMPI_COMM_WORLD_SIZE=4"),
            std::string::npos)
      << lines.str();
}

TEST_F(LaunchTest, SingleSlotWithoutLauncherRestartsACrash) {
  Command(0, "crash");
  const std::string cmd =
      "env -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK "
      "RTFT_TEST_DIR=" +
      dir_ + " RTFT_TEST_STEPS=5 RTFT_TEST_STEP_MS=20 " + RTFT_DP_LAUNCH + " --exit-code-file " +
      dir_ + "/exit-code -- " + RTFT_TEST_APP;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto starts = LinesOf(dir_, 0, "start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0].Get("role"), "initial");
  EXPECT_EQ(starts[1].Get("role"), "restarted");
  EXPECT_EQ(starts[1].Int("epoch"), 2);
}

TEST_F(LaunchTest, PrintConfigListsEverySetting) {
  const std::string out = dir_ + "/config";
  ASSERT_EQ(
      std::system(
          (std::string("RTFT_SPARES=3 ") + RTFT_DP_LAUNCH + " --print-config > " + out).c_str()),
      0);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  for (const char* name :
       {"RTFT_SPARES=3", "RTFT_HEARTBEAT_MS=100", "RTFT_HEARTBEAT_TIMEOUT_MS",
        "RTFT_MAX_RESTARTS_PER_SLOT", "RTFT_ON_SPARES_EXHAUSTED", "RTFT_WATCHDOG_S",
        "RTFT_LOG_LEVEL", "RTFT_JOB_KEY_FILE", "RTFT_CKPT_POOL_BYTES"})
    EXPECT_NE(text.str().find(name), std::string::npos) << name << "\n" << text.str();
  EXPECT_NE(text.str().find("from the environment"), std::string::npos);
}

}  // namespace
}  // namespace rtft::launch::test
