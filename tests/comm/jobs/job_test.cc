// Communicators in real jobs: `mpirun --enable-recovery dp-launch -- comm-job-app`
// (comm_job_app.cc), with ranks SIGKILLed and SIGSTOPped at a named phase of a large all-reduce
// (RTFT_FAULT, docs/testing.md): the survivors' calls end with kAborted at the failure, long
// before their deadline, a timeout ends with kDeadlineExceeded at the deadline, and the next
// epoch's communicator, with a spare in the lost rank's place, computes correct results. How soon
// after the failure a call returns is a figure of `rtft-bench comm` (docs/benchmarks.md), not a
// bound these tests assert: on a loaded machine it is whatever the scheduler makes it.
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::milliseconds;

// The deadline of the all-reduce a failure interrupts: a call that ends before it was ended by
// the failure (and says kAborted).
constexpr int kCallDeadlineMs = 60000;
using std::chrono::seconds;

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

class CommJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rtft-comm-job-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    job_ = std::make_unique<Job>(dir_);
  }
  void TearDown() override {
    job_.reset();
    KillApps();
    if (!HasFailure()) std::system(("rm -rf " + dir_).c_str());
  }
  // The app is not the launcher tests' app, so Job does not know its name: end what is left.
  void KillApps() {
    for (const ProcInfo& p : JobProcesses(dir_))
      if (p.comm == "comm-job-app") kill(p.pid, SIGKILL);
  }
  JobSpec Spec(int slots, int spares, std::map<std::string, std::string> env,
               int heartbeat_timeout_ms = 500) {
    slots_ = slots;
    JobSpec spec;
    spec.slots = slots;
    spec.dp_args = {"--spares", std::to_string(spares),   "--heartbeat-ms",
                    "50",       "--heartbeat-timeout-ms", std::to_string(heartbeat_timeout_ms)};
    spec.env = std::move(env);
    spec.env["RTFT_FAULT_LOG"] = dir_ + "/faults.log";
    spec.env["RTFT_COMM_GLOO_HOST"] = "127.0.0.1";
    return spec;
  }
  // The victim's slot, once it reached its fault point (the fault line names it).
  bool WaitFault(int* slot) {
    return WaitFor(
        [&] {
          std::ifstream in(dir_ + "/faults.log");
          std::string word;
          while (in >> word)
            if (word.rfind("slot=", 0) == 0) *slot = std::atoi(word.c_str() + 5);
          return *slot >= 0;
        },
        seconds(60));
  }
  // The application on `slot` as this test sees it (it runs in a PID namespace of its own), and
  // the slot's dp-launch.
  bool Victim(int slot, pid_t* app, pid_t* agent) {
    for (const ProcInfo& p : JobProcesses(dir_)) {
      if (p.comm != "comm-job-app" || p.Env("RTFT_SLOT") != std::to_string(slot)) continue;
      *app = p.pid;
      *agent = job_->AgentOf(slot);
      return *agent > 0;
    }
    return false;
  }
  bool AllBegan(int ranks, int i, int skip_slot) {
    int n = 0;
    for (int s = 0; s < slots_; ++s) {
      if (s == skip_slot) continue;
      for (const auto& l : LinesOf(dir_, s, "allreduce-begin"))
        if (l.Int("i") == i) ++n;
    }
    return n >= ranks;
  }
  std::optional<LogLine> Last(int slot, const std::string& kind) {
    auto lines = LinesOf(dir_, slot, kind);
    if (lines.empty()) return std::nullopt;
    return lines.back();
  }
  int Finish() {
    auto rc = job_->Wait(seconds(120));
    EXPECT_TRUE(rc.has_value()) << "the job did not end\n" << job_->Dump();
    return job_->JobExitCode();
  }

  std::string dir_;
  int slots_ = 0;
  std::unique_ptr<Job> job_;
};

TEST_F(CommJobTest, EveryCollectiveIsCorrectInRealProcesses) {
  for (int slots : {1, 3, 5}) {
    SCOPED_TRACE(std::to_string(slots) + " ranks");
    job_ = std::make_unique<Job>(dir_ + "/" + std::to_string(slots));
    ASSERT_EQ(std::system(("mkdir -p " + dir_ + "/" + std::to_string(slots)).c_str()), 0);
    const std::string sub = dir_ + "/" + std::to_string(slots);
    JobSpec spec = Spec(slots, 0, {{"RTFT_TEST_MODE", "verify"}});
    spec.env["RTFT_FAULT_LOG"] = sub + "/faults.log";
    job_->Start(spec);
    auto rc = job_->Wait(seconds(240));
    ASSERT_TRUE(rc.has_value()) << job_->Dump();
    EXPECT_EQ(job_->JobExitCode(), 0) << job_->Dump();
    for (int s = 0; s < slots; ++s) {
      auto v = LinesOf(sub, s, "verify");
      ASSERT_EQ(v.size(), 1u) << job_->Dump();
      EXPECT_EQ(v[0].Get("ok"), "1") << v[0].Get("what");
    }
  }
}

TEST_F(CommJobTest, ARankKilledMidAllReduceAbortsTheOthersAndASpareTakesItsPlace) {
  job_->Start(Spec(4, 1,
                   {{"RTFT_TEST_MODE", "fail"},
                    {"RTFT_TEST_VICTIM", "1"},
                    {"RTFT_TEST_CALL_TIMEOUT_MS", std::to_string(kCallDeadlineMs)}}));
  int victim_slot = -1;
  ASSERT_TRUE(WaitFault(&victim_slot)) << job_->Dump();
  pid_t victim = 0, agent = 0;
  ASSERT_TRUE(Victim(victim_slot, &victim, &agent)) << job_->Dump();
  // The others are inside the same all-reduce, waiting for the victim's data.
  ASSERT_TRUE(WaitFor([&] { return AllBegan(2, 1, victim_slot); }, seconds(30))) << job_->Dump();
  const long long killed_at = NowUs();
  ASSERT_EQ(kill(agent, SIGKILL), 0);  // the whole slot: its agent, then the application
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  int rebuilt = 0;
  for (int s = 0; s < 4; ++s) {
    if (s == victim_slot) continue;
    if (s != 3) {
      auto end = Last(s, "allreduce-end");
      ASSERT_TRUE(end.has_value()) << job_->Dump();
      EXPECT_EQ(end->Get("ok"), "0");
      EXPECT_EQ(end->Get("code"), "ABORTED") << end->Get("why");
      // Aborted by the failure event, not ended by its deadline.
      const double ms = (end->Int("t") - killed_at) / 1000.0;
      EXPECT_LT(ms, kCallDeadlineMs) << "slot " << s << " returned " << ms << " ms after the kill";
      RecordProperty("slot" + std::to_string(s) + "_returned_ms", std::to_string(ms));
    }
    auto r = Last(s, "rebuilt");
    ASSERT_TRUE(r.has_value()) << "slot " << s << "\n" << job_->Dump();
    EXPECT_EQ(r->Int("epoch"), 2);
    EXPECT_EQ(r->Int("world"), 3);
    ++rebuilt;
    auto after = Last(s, "after");
    ASSERT_TRUE(after.has_value()) << job_->Dump();
    EXPECT_EQ(after->Get("ok"), "1") << "slot " << s;
  }
  EXPECT_EQ(rebuilt, 3);
  // The spare (slot 3) took rank 1.
  auto spare = Last(3, "rebuilt");
  ASSERT_TRUE(spare.has_value());
  EXPECT_EQ(spare->Int("rank"), 1);
}

TEST_F(CommJobTest, AStoppedRankEndsTheCallAtItsDeadline) {
  // Heartbeats outlast the call's deadline: no failure event comes first.
  job_->Start(Spec(3, 0,
                   {{"RTFT_TEST_MODE", "fail"},
                    {"RTFT_TEST_VICTIM", "2"},
                    {"RTFT_TEST_VICTIM_FAULT", "comm.gloo.ring_segment@3:stop"},
                    {"RTFT_TEST_CALL_TIMEOUT_MS", "1500"},
                    {"RTFT_TEST_EVENT_WAIT_MS", "0"}},
                   /*heartbeat_timeout_ms=*/30000));
  int victim_slot = -1;
  ASSERT_TRUE(WaitFault(&victim_slot)) << job_->Dump();
  pid_t victim = 0, agent = 0;
  ASSERT_TRUE(Victim(victim_slot, &victim, &agent)) << job_->Dump();
  int timed_out = 0;
  for (int s = 0; s < 3; ++s) {
    if (s == victim_slot) continue;
    ASSERT_TRUE(WaitFor([&] { return Last(s, "no-event").has_value(); }, seconds(60)))
        << job_->Dump();
    auto end = Last(s, "allreduce-end");
    ASSERT_TRUE(end.has_value());
    // The first survivor to pass its deadline closes its connections (Gloo does on a timeout),
    // which ends the other's call a moment before its own deadline: kAborted then.
    const std::string code = end->Get("code");
    if (code == "DEADLINE_EXCEEDED") {
      ++timed_out;
    } else {
      EXPECT_EQ(code, "ABORTED") << end->Get("why");
    }
    EXPECT_GE(end->Int("took_ms"), 1400);
    EXPECT_LT(end->Int("took_ms"), 4000);
  }
  EXPECT_GE(timed_out, 1);
  kill(victim, SIGKILL);
}

TEST_F(CommJobTest, AStoppedSlotEndsTheCallAtTheFailureEvent) {
  // Heartbeats end before the call's deadline: the failure event aborts the call.
  job_->Start(Spec(4, 1,
                   {{"RTFT_TEST_MODE", "fail"},
                    {"RTFT_TEST_VICTIM", "1"},
                    {"RTFT_TEST_VICTIM_FAULT", "comm.gloo.ring_segment@3:stop"},
                    {"RTFT_TEST_CALL_TIMEOUT_MS", std::to_string(kCallDeadlineMs)}},
                   /*heartbeat_timeout_ms=*/500));
  int victim_slot = -1;
  ASSERT_TRUE(WaitFault(&victim_slot)) << job_->Dump();
  pid_t victim = 0, agent = 0;
  ASSERT_TRUE(Victim(victim_slot, &victim, &agent)) << job_->Dump();
  ASSERT_TRUE(WaitFor([&] { return AllBegan(2, 1, victim_slot); }, seconds(30))) << job_->Dump();
  ASSERT_EQ(kill(agent, SIGSTOP), 0);  // the whole slot stops: heartbeats end
  for (int s = 0; s < 3; ++s) {
    if (s == victim_slot) continue;
    ASSERT_TRUE(WaitFor([&] { return Last(s, "after").has_value(); }, seconds(60))) << job_->Dump();
    auto end = Last(s, "allreduce-end");
    auto ev = Last(s, "event");
    ASSERT_TRUE(end.has_value() && ev.has_value());
    EXPECT_EQ(end->Get("code"), "ABORTED") << end->Get("why");
    // At the event, not at the deadline: the slot's heartbeats ended long before it.
    const double gap = (end->Int("t") - ev->Int("t")) / 1000.0;
    EXPECT_LT(gap, kCallDeadlineMs) << "slot " << s << " returned " << gap << " ms after its event";
    RecordProperty("slot" + std::to_string(s) + "_after_event_ms", std::to_string(gap));
    EXPECT_EQ(Last(s, "after")->Get("ok"), "1");
  }
  kill(agent, SIGKILL);
  kill(victim, SIGKILL);
}

}  // namespace
}  // namespace rtft::launch::test
