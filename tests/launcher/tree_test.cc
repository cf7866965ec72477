// The application's whole process tree belongs to its slot (docs/launcher.md "The application's
// process tree"): under real mpirun --enable-recovery, with real signals, no process of it
// outlives its agent or runs beside the process that took its rank, whether it is behind a shell,
// a daemon that left its group and session, or a spare's application in standby.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

class TreeTest : public JobFixture {
 protected:
  JobSpec Spec(int slots, int spares, std::vector<std::string> extra = {}) {
    JobSpec spec = BaseSpec(slots, spares, /*steps=*/40);
    spec.dp_args.insert(spec.dp_args.end(), extra.begin(), extra.end());
    return spec;
  }
  int Finish() {
    auto rc = WaitLauncher();
    if (rc) EXPECT_EQ(*rc, 0) << job_->Dump();
    return job_->JobExitCode();
  }
  // Rank 1 starts a daemon (setsid, double fork): its pid as the test sees it.
  pid_t StartDaemon() {
    Command(1, "daemonize");
    EXPECT_TRUE(WaitFor([&] { return !LinesOf(dir_, 1, "daemon").empty(); }, seconds(30)))
        << job_->Dump();
    auto lines = LinesOf(dir_, 1, "daemon");
    pid_t daemon = 0, agent = 0;
    if (lines.empty() || !job_->FindApp(1, Last(lines).Int("pid"), &daemon, &agent)) {
      ADD_FAILURE() << "the daemon is not running\n" << job_->Dump();
      return 0;
    }
    return daemon;
  }
  void DaemonDiesWithItsAgent(const std::string& isolation) {
    job_->Start(Spec(3, 1, {"--app-isolation", isolation}));
    WaitStep(1, 3);
    pid_t app, agent;
    ASSERT_TRUE(job_->FindRank(1, &app, &agent)) << job_->Dump();
    const pid_t daemon = StartDaemon();
    ASSERT_GT(daemon, 0);
    EXPECT_NE(getsid(daemon), getsid(app)) << "the daemon left the application's session";
    EXPECT_NE(ParentOf(daemon), app);
    ASSERT_EQ(kill(agent, SIGKILL), 0);
    EXPECT_TRUE(WaitFor([&] { return !Alive(daemon) && !Alive(app); }, seconds(10)))
        << "the daemon of rank 1 outlived its SIGKILLed agent (" << isolation << ")";
    EXPECT_EQ(Finish(), 0) << job_->Dump();
    auto starts = Starts(2);
    ASSERT_EQ(starts.size(), 1u) << job_->Dump();
    EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  }
};

TEST_F(TreeTest, SigkilledAgentTakesTheApplicationBehindAShellAlong) {
  JobSpec spec = Spec(3, 1);
  spec.app = BehindShell();
  job_->Start(spec);
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent)) << job_->Dump();
  const std::string old_id = Last(Starts(1)).Get("id");
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  EXPECT_TRUE(WaitFor([&] { return !Alive(app); }, seconds(10)))
      << "rank 1's application outlived its SIGKILLed agent";
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(2);
  ASSERT_EQ(starts.size(), 1u) << job_->Dump();
  EXPECT_EQ(starts[0].Get("role"), "spare-activated");
  EXPECT_EQ(starts[0].Int("rank"), 1);
  EXPECT_LT(LastTime(1, old_id), starts[0].Int("t")) << "two processes held rank 1 at once\n"
                                                     << job_->Dump();
}

TEST_F(TreeTest, DaemonInAPidNamespaceDiesWithItsAgent) { DaemonDiesWithItsAgent("auto"); }

TEST_F(TreeTest, DaemonUnderTheSubreaperDiesWithItsAgent) {
  DaemonDiesWithItsAgent("process-group");
}

TEST_F(TreeTest, KilledShellTakesItsApplicationAlongBeforeTheRestart) {
  JobSpec spec = Spec(2, 0);
  spec.app = BehindShell();
  job_->Start(spec);
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent)) << job_->Dump();
  const pid_t shell = ParentOf(app);
  ASSERT_GT(shell, 0);
  const std::string old_id = Last(Starts(1)).Get("id");
  ASSERT_EQ(kill(shell, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Starts(1).size() == 2; }, seconds(30))) << job_->Dump();
  EXPECT_FALSE(Alive(app)) << "the application outlived its shell";
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  auto starts = Starts(1);
  ASSERT_EQ(starts.size(), 2u) << job_->Dump();
  EXPECT_EQ(starts[1].Get("role"), "restarted");
  EXPECT_LT(LastTime(1, old_id), starts[1].Int("t")) << "two processes held rank 1 at once\n"
                                                     << job_->Dump();
}

TEST_F(TreeTest, SpareBehindAShellEndsWithTheJob) {
  JobSpec spec = BaseSpec(3, 1, /*steps=*/10);
  spec.app = BehindShell();
  job_->Start(spec);
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 0) << job_->Dump();
  EXPECT_EQ(LinesOf(dir_, 2, "launched").size(), 1u) << job_->Dump();
  EXPECT_TRUE(Starts(2).empty()) << job_->Dump();
}

// The keeper passes the application's wait status on as it is: 75 asks for a restart, 137 is a
// final exit code (not a SIGKILL).
TEST_F(TreeTest, ExitStatusCrossesTheKeeperUnchanged) {
  job_->Start(Spec(2, 0));
  WaitStep(1, 3);
  Command(1, "exit 75");
  ASSERT_TRUE(WaitFor([&] { return Starts(1).size() == 2; }, seconds(30))) << job_->Dump();
  EXPECT_EQ(Starts(1)[1].Get("role"), "restarted");
  Command(1, "exit 137");
  EXPECT_EQ(Finish(), 137) << job_->Dump();
  EXPECT_EQ(Starts(1).size(), 2u) << "exit code 137 was taken for a SIGKILL\n" << job_->Dump();
}

// mpirun forwards SIGUSR1 and SIGUSR2 to dp-launch (and Slurm's --signal sends them): they reach
// the application and end nothing.
TEST_F(TreeTest, Sigusr1ReachesTheApplication) {
  job_->Start(Spec(2, 0));
  WaitStep(1, 3);
  const pid_t agent = job_->AgentOf(1);
  ASSERT_GT(agent, 0);
  ASSERT_EQ(kill(agent, SIGUSR1), 0);
  EXPECT_TRUE(WaitFor([&] { return !LinesOf(dir_, 1, "signal").empty(); }, seconds(30)))
      << job_->Dump();
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_EQ(Starts(1).size(), 1u) << job_->Dump();
}

// A stopped process cannot end itself, and without a standby a stopped slot 0 takes the
// coordinator with it: its keeper ends its application and then the dp-launch itself, the other
// slots end when they have not heard from the coordinator for its timeout, and mpirun returns
// with the job's code (1, said by a surviving slot). With a standby (the default) the job goes
// on: launcher_coordinator_slot_test.
TEST_F(TreeTest, StoppedSlotZeroWithoutAStandbyIsEndedAndTheLauncherReturns) {
  JobSpec spec = Spec(3, 1);
  spec.dp_args.insert(spec.dp_args.end(), {"--standby-coordinator", "off"});
  spec.env["RTFT_CTRL_COORDINATOR_TIMEOUT_MS"] = "2000";
  job_->Start(spec);
  WaitStep(1, 3);
  pid_t app, agent;
  ASSERT_TRUE(job_->FindRank(0, &app, &agent)) << job_->Dump();
  ASSERT_EQ(kill(agent, SIGSTOP), 0);
  auto rc = WaitLauncher(seconds(30));
  EXPECT_EQ(rc.value_or(-1), 0) << job_->Dump();
  EXPECT_EQ(job_->JobExitCode(), 1) << job_->Dump();
  EXPECT_NE(job_->Output().find("job exit code 1 (said by slot"), std::string::npos)
      << job_->Output();
  EXPECT_FALSE(Alive(agent));
  EXPECT_FALSE(Alive(app));
}

// Without privilege, dp-launch holds the tree in a user and PID namespace; the application keeps
// its user id. Run as nobody when the test is root (one slot, no launcher).
TEST_F(TreeTest, UnprivilegedUserGetsAUserAndPidNamespace) {
  const uid_t nobody = 65534;
  const bool root = geteuid() == 0;
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  const std::string out = dir_ + "/dp-launch.out";
  Command(0, "daemonize");
  const pid_t pid = fork();
  if (pid == 0) {
    if (root && (setgroups(0, nullptr) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0))
      _exit(120);
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
      unsetenv(v);
    setenv("RTFT_TEST_DIR", dir_.c_str(), 1);
    setenv("RTFT_TEST_STEPS", "600", 1);
    setenv("RTFT_TEST_STEP_MS", "100", 1);
    FILE* f = std::fopen(out.c_str(), "w");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    const std::string dp_launch = DpLaunchUnderTest();
    execl(dp_launch.c_str(), dp_launch.c_str(), "--log-level", "info", "--", RTFT_TEST_APP,
          nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitFor([&] { return !LinesOf(dir_, 0, "daemon").empty(); }, seconds(30)))
      << job_->Output() << ReadSlotLog(dir_, 0).size();
  pid_t daemon = 0, app = 0;
  for (const ProcInfo& p : JobProcesses(dir_)) {
    if (p.comm != "launcher-test-a" || p.nspid.empty()) continue;
    if (p.nspid.back() == Last(LinesOf(dir_, 0, "daemon")).Int("pid")) daemon = p.pid;
    if (p.nspid.back() == Last(Starts(0)).Int("pid")) app = p.pid;
  }
  ASSERT_GT(daemon, 0);
  ASSERT_GT(app, 0);
  if (root) EXPECT_EQ(Last(LinesOf(dir_, 0, "launched")).Int("uid"), static_cast<long>(nobody));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WaitFor([&] { return !Alive(daemon) && !Alive(app); }, seconds(10)))
      << "the application's tree outlived its SIGKILLed agent";
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  if (root)
    EXPECT_NE(text.str().find("user and PID namespace"), std::string::npos) << text.str();
  else
    EXPECT_NE(text.str().find("namespace"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace rtft::launch::test
