// The standby coordinator's other cases with rtft-train under real `mpirun --enable-recovery
// dp-launch` (coordinator_job_test.cc has slot 0 lost at each phase): a stopped primary that
// resumes after the takeover is refused and ends its slot; losing the standby alone is an
// ordinary slot loss; losing both ends the job with exit code 1 and the newest L3 version lets it
// start again; a minority cut off from the primary (the test hook) makes no takeover; and two
// loaded cores make no false takeover. Every run that finishes ends with the failure-free digest.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "launcher/train_run.h"

namespace rtft::launch::test {
namespace {

// Stops (or resumes) slot 0 the way a frozen node would: every one of its processes. The keeper
// is stopped first and resumed last, so it never sees its agent stopped.
void FreezeSlot(const std::string& dir, int slot, bool freeze) {
  std::vector<pid_t> keepers, others;
  for (pid_t pid : SlotProcesses(dir, slot, false)) {
    for (const ProcInfo& p : JobProcesses(dir))
      if (p.pid == pid) (p.comm == "dp-keeper" ? keepers : others).push_back(pid);
  }
  EXPECT_FALSE(keepers.empty());
  EXPECT_GE(others.size(), 2u) << "its dp-launch and application";
  if (freeze)
    for (pid_t pid : keepers) kill(pid, SIGSTOP);
  for (pid_t pid : others) kill(pid, freeze ? SIGSTOP : SIGCONT);
  if (!freeze)
    for (pid_t pid : keepers) kill(pid, SIGCONT);
}

// Processes that keep every core busy for as long as the object lives (ended by their pid).
class Burners {
 public:
  explicit Burners(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~Burners() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

class StandbyJobTest : public TrainRunTest {};

TEST_F(StandbyJobTest, AStoppedPrimaryThatResumesAfterTheTakeoverIsRefusedAndEndsItsSlot) {
  TrainSpec spec;
  spec.faults = "0:protect.update@6:hang";
  // A long timeout: the other agents on this host fence (SIGKILL) a retired dp-launch only a
  // heartbeat timeout after its retirement, and this test resumes it before that.
  spec.heartbeat_ms = 100;
  spec.heartbeat_timeout_ms = 2000;
  spec.during = [](Job& job, const std::string& dir) {
    ASSERT_TRUE(WaitFault(dir, 0, "protect.update")) << job.Output();
    FreezeSlot(dir, 0, true);
    ASSERT_TRUE(WaitOutput(job, "takes over from slot 0")) << job.Output();
    FreezeSlot(dir, 0, false);
  };
  TrainRun run = Start("resumed-primary", spec);
  ExpectIdentical(run, 4, "a stopped primary resumed after the takeover");
  EXPECT_EQ(run.Count("slot 1 takes over from slot 0 (generation 2)"), 1u) << run.output;
  // Refused: it stepped down at its standby's first answer, and its slot ended.
  EXPECT_NE(run.output.find("coordinator of slot 0 (generation 1) steps down"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 0: a newer primary coordinator took over from this one"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.Count("job exit code 0 (said by slot 1, the primary coordinator)"), 1u)
      << run.output;
}

TEST_F(StandbyJobTest, LosingTheStandbyAloneIsAnOrdinarySlotLoss) {
  for (const std::string& point : {"train.backward@6", "protect.update@6"}) {
    SCOPED_TRACE(point);
    TrainSpec spec;
    spec.faults = "1:" + point + ":hang";
    spec.dp_extra = {"--log-level", "info"};
    spec.during = [](Job& job, const std::string& dir) {
      EXPECT_EQ(LoseFiredSlots(job, dir, 1), std::set<int>{1});
    };
    TrainRun run = Start("standby-lost-" + point, spec);
    ExpectIdentical(run, 4, "the standby (slot 1) lost at " + point);
    EXPECT_EQ(run.Count("takes over"), 0u) << run.output;
    EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("slot 2 ("), std::string::npos) << "a new standby\n" << run.output;
    EXPECT_GE(run.Count("becomes the standby"), 2u) << run.output;
  }
}

// Primary and standby lost at once: no coordinator is left. The agents end their applications
// once RTFT_CTRL_COORDINATOR_TIMEOUT_MS passed, the job's exit code is 1, and the job started
// again resumes from its newest L3 version, ending with the failure-free digest.
TEST_F(StandbyJobTest, LosingPrimaryAndStandbyEndsTheJobCleanlyAndItResumesFromL3) {
  const std::string ckpt = root_ + "/l3-both-lost";
  TrainSpec spec;
  spec.faults = "0:protect.update@12:hang,1:protect.update@12:hang";
  spec.train_extra = {"--l3-every", "5", "--ckpt-dir", ckpt};
  spec.env = {{"RTFT_CTRL_COORDINATOR_TIMEOUT_MS", "2500"}};
  spec.during = [ckpt](Job& job, const std::string& dir) {
    // Both stand at their point; an L3 version is committed (in the background) before they go.
    ASSERT_TRUE(WaitFault(dir, 0, "protect.update") && WaitFault(dir, 1, "protect.update"));
    ASSERT_TRUE(WaitFor([&] { return access((ckpt + "/LATEST").c_str(), F_OK) == 0; },
                        std::chrono::seconds(60)))
        << "no L3 version committed";
    EXPECT_EQ(LoseFiredSlots(job, dir, 2), (std::set<int>{0, 1}));
  };
  TrainRun run = Start("both-lost", spec);
  EXPECT_TRUE(run.ended);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.leftovers, "") << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("did not take over"), std::string::npos) << run.output;
  TrainSpec again;
  again.spares = 0;
  again.train_extra = {"--ckpt-dir", ckpt};
  TrainRun resumed = Start("both-lost-again", again);
  EXPECT_TRUE(
      std::regex_search(resumed.output, std::regex("restored step (5|10) from the L3 checkpoint")))
      << resumed.output;
  ExpectIdentical(resumed, 4, "started again after both coordinators were lost");
}

// The primary stops hearing slot 3 (RTFT_CTRL_TEST_PARTITION) while rank 3 stands at a fault
// point: slot 3 loses the primary and votes for the standby, alone. No takeover: the primary
// declares slot 3 lost and the spare takes rank 3.
TEST_F(StandbyJobTest, AMinorityThatLostThePrimaryMakesNoTakeover) {
  TrainSpec spec;
  spec.faults = "3:protect.update@6:hang";
  const std::string partition = root_ + "/partitioned-slots";
  spec.env = {{"RTFT_CTRL_TEST_PARTITION", partition}};
  spec.during = [partition](Job& job, const std::string& dir) {
    ASSERT_TRUE(WaitFault(dir, 3, "protect.update")) << job.Output();
    std::ofstream(partition) << "3\n";
  };
  TrainRun run = Start("partition", spec);
  ExpectIdentical(run, 4, "slot 3 cut off from the primary");
  EXPECT_EQ(run.Count("takes over"), 0u) << run.output;
  EXPECT_NE(run.output.find("slot 3: the primary (slot 0) silent"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=3"), std::string::npos) << run.output;
}

// Four processes spin on the two cores for the whole run: heartbeats arrive late, and still no
// standby takes over (the default timeouts: 100 ms heartbeats, 1 s timeout).
TEST_F(StandbyJobTest, TwoLoadedCoresCauseNoFalseTakeover) {
  Burners load(4);
  ASSERT_EQ(load.size(), 4u);
  TrainSpec spec;
  spec.heartbeat_ms = 100;
  spec.heartbeat_timeout_ms = 1000;
  spec.train_extra = {"--steps", "60"};
  spec.dp_extra = {"--log-level", "info"};
  spec.limit = std::chrono::seconds(300);
  TrainRun run = Start("loaded", spec);
  ExpectIdentical(run, 4, "two loaded cores", {"--steps", "60"});
  EXPECT_EQ(run.Count("becomes the standby"), 1u) << run.output;
  EXPECT_EQ(run.Count("takes over"), 0u) << run.output;
  EXPECT_EQ(run.Count("steps down"), 0u) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
