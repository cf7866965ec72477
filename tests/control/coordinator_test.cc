// Coordinator and agent clients on threads over real tcp://127.0.0.1 CURVE sockets.
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>

#include <thread>

#include "control/control_test_util.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using testing::JobConfig;
using testing::TestJob;
using Clock = std::chrono::steady_clock;

TEST(Coordinator, JoinAssignsRanksToActivesAndNoneToSpares) {
  TestJob job(JobConfig{5, 2});
  ASSERT_TRUE(job.JoinAll());
  for (SlotId s = 0; s < 3; ++s) {
    EXPECT_EQ(job.first(s).rank, s);
    EXPECT_EQ(job.first(s).role, Role::kActive);
    EXPECT_EQ(job.first(s).world_size, 3);
    EXPECT_EQ(job.first(s).epoch, 1u);
  }
  for (SlotId s = 3; s < 5; ++s) {
    EXPECT_EQ(job.first(s).rank, kNoRank);
    EXPECT_EQ(job.first(s).role, Role::kSpare);
  }
  Membership m = job.coord().membership();
  EXPECT_EQ(m.rank_to_slot, (std::vector<SlotId>{0, 1, 2}));
  EXPECT_EQ(m.spares, (std::vector<SlotId>{3, 4}));
}

TEST(Coordinator, JoinWaitsForEverySlotAndCanBeRetried) {
  TestJob job(JobConfig{2, 0});
  auto a0 = AgentClient::Connect(job.ClientOptions(0));
  ASSERT_TRUE(a0.ok());
  EXPECT_EQ((*a0)->KvPut("k", "v").code(), StatusCode::kFailedPrecondition);  // before Join
  EXPECT_EQ((*a0)->Join(milliseconds(150)).status().code(), StatusCode::kDeadlineExceeded);
  auto a1 = AgentClient::Connect(job.ClientOptions(1));
  ASSERT_TRUE(a1.ok());
  auto j1 = (*a1)->Join(milliseconds(3000));
  ASSERT_TRUE(j1.ok()) << j1.status();
  auto j0 = (*a0)->Join(milliseconds(3000));
  ASSERT_TRUE(j0.ok()) << j0.status();
  EXPECT_EQ(j0->rank, 0);
  EXPECT_EQ(j1->rank, 1);
  EXPECT_EQ(j0->epoch, 1u);
}

TEST(Coordinator, ProcessCrashRestartsOnTheSameSlot) {
  TestJob job(JobConfig{4, 1, /*max_restarts=*/2});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(1).ReportFailure(FailureKind::kProcessCrash, 1, 9).ok());
  for (SlotId s = 0; s < 4; ++s) {
    ControlEvent e = job.NextEvent(s);
    EXPECT_EQ(e.type, ControlEvent::Type::kEpochChange);
    EXPECT_EQ(e.membership.epoch, 2u);
    EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{1});
    EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{0, 1, 2}));
    if (s == 1) {
      EXPECT_EQ(e.assignment.role, Role::kRestarted);
      EXPECT_EQ(e.assignment.rank, 1);
    }
  }
}

TEST(Coordinator, TooManyRestartsActivateASpare) {
  TestJob job(JobConfig{4, 1, /*max_restarts=*/1});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kProcessCrash, 2, 0).ok());
  EXPECT_EQ(job.NextEvent(2).assignment.role, Role::kRestarted);
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kHang, 2, 0).ok());
  ControlEvent e = job.EventAtLeast(3, 3);
  EXPECT_EQ(e.membership.epoch, 3u);
  EXPECT_EQ(e.assignment.role, Role::kActivated);
  EXPECT_EQ(e.assignment.rank, 2);
  EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{0, 1, 3}));
  EXPECT_EQ(e.membership.retired, std::vector<SlotId>{2});
  EXPECT_TRUE(e.membership.spares.empty());
  ControlEvent r = job.EventAtLeast(2, 3);
  EXPECT_EQ(r.assignment.role, Role::kRetired);
  EXPECT_EQ(r.assignment.rank, kNoRank);
}

TEST(Coordinator, DeviceErrorIsPermanent) {
  TestJob job(JobConfig{3, 1, 5});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(0).ReportFailure(FailureKind::kDeviceError, 0, 0).ok());
  ControlEvent e = job.NextEvent(2);
  EXPECT_EQ(e.assignment.role, Role::kActivated);
  EXPECT_EQ(e.assignment.rank, 0);
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{0});
}

// How long slot `slot`'s heartbeats ever paused, up to `at`: its thread starved on a loaded machine
// (CI's two cores) may have been silent before the kill, which a test then does not judge the
// coordinator by (`Unjudged` says so).
Clock::duration HeartbeatStall(TestJob& job, SlotId slot, Clock::time_point at) {
  return std::max(job.agent(slot).longest_heartbeat_gap(),
                  at - job.agent(slot).last_heartbeat_sent());
}
void Unjudged(SlotId slot, Clock::duration stalled, const char* what) {
  std::cout << "slot " << slot << "'s heartbeats paused "
            << std::chrono::duration_cast<milliseconds>(stalled).count()
            << " ms before the kill: " << what << " is not checked\n";
}

TEST(Coordinator, HeartbeatLossIsDetectedAndASpareTakesOver) {
  JobConfig cfg{4, 1};
  // In a loaded suite (three tests on two cores) the coordinator once heard nothing from slot 1
  // for 1.5 s while its loop ran and the agent's heartbeats were never 750 ms apart (the sockets'
  // own threads starved, or the connections' handshakes): 4 s, so that such a silence is not
  // taken for the kill. Not explained yet.
  cfg.heartbeat_timeout = milliseconds(4000);
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  const auto killed = Clock::now();
  const auto stalled = HeartbeatStall(job, 1, killed);
  job.Kill(1);
  ControlEvent e = job.NextEvent(3, milliseconds(10000));
  EXPECT_EQ(e.assignment.role, Role::kActivated);
  EXPECT_EQ(e.assignment.rank, 1);
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{1});
  const auto declared = job.coord().stats().epoch_declared_at;
  // A slot whose heartbeats kept coming was not taken for lost: declared after the kill, unless
  // its heartbeats had paused for half the timeout or more (then the primary may rightly have
  // been first). How soon after the kill is the detection latency, a figure of `rtft-bench
  // detect` (docs/benchmarks.md), not of a test on a shared machine.
  if (stalled < cfg.heartbeat_timeout / 2) {
    // Twice in a loaded suite the coordinator heard nothing from slot 1 from the job's start
    // until it declared it lost, its agent sending on time: what the coordinator counted says
    // more next time (a refused message or peer, a connection closed, how many heartbeats).
    const CoordinatorStats st = job.coord().stats();
    EXPECT_GE(declared, killed)
        << "declared " << std::chrono::duration_cast<milliseconds>(killed - declared).count()
        << " ms before the kill; the coordinator's counts: messages " << st.messages
        << ", heartbeats " << st.heartbeats << ", rejected messages " << st.rejected_messages
        << ", rejected peers " << st.rejected_peers << ", closed connections "
        << st.closed_connections << "; slot 1's heartbeats paused at most "
        << std::chrono::duration_cast<milliseconds>(stalled).count() << " ms before the kill";
  } else {
    Unjudged(1, stalled, "the order of kill and declaration");
  }
}

// The time the coordinator's loop did not run is not silence (docs/control-protocol.md): held for
// 1.4 s, under half the 3 s timeout, right after slot 1 is killed, it declares the slot lost about
// 1.3 s later than the timeout alone would (3 s after its last heartbeat: the loop's credit is the
// hold less its tick of 100 ms). Two stalls under half the timeout, an agent's and the
// coordinator's, so never add up to a loss (HeartbeatLossIsDetectedAndASpareTakesOver failed so).
TEST(Coordinator, TheTimeItsLoopDidNotRunIsNotASlotsSilence) {
  std::atomic<bool> hold{false};
  JobConfig cfg{4, 1};
  cfg.heartbeat_timeout = milliseconds(3000);
  cfg.coordinator_fault_point = [&] {
    while (hold) std::this_thread::sleep_for(milliseconds(5));
  };
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  const auto killed = Clock::now();
  const auto stalled = HeartbeatStall(job, 1, killed);
  job.Kill(1);
  hold = true;
  std::this_thread::sleep_for(milliseconds(1400));
  hold = false;
  ControlEvent e = job.NextEvent(3, milliseconds(20000));
  EXPECT_EQ(e.assignment.rank, 1);
  const auto after = job.coord().stats().epoch_declared_at - killed;
  // 3 s without the credit; with it 4.2 s or more, less the time slot 1's last heartbeat was
  // sent before the kill (at most `stalled`).
  if (stalled < milliseconds(300)) {
    EXPECT_GE(after, milliseconds(3900))
        << std::chrono::duration_cast<milliseconds>(after).count() << " ms";
  } else {
    Unjudged(1, stalled, "the declaration's time");
  }
}

TEST(Coordinator, TwoSlotsLostTogetherBothRanksReassigned) {
  TestJob job(JobConfig{5, 2});
  ASSERT_TRUE(job.JoinAll());
  job.Kill(0);
  job.Kill(2);
  // One or two epochs; after them, both ranks live on the spares.
  ControlEvent e = job.NextEvent(1, milliseconds(20000));
  if (e.membership.retired.size() < 2) e = job.NextEvent(1, milliseconds(20000));
  EXPECT_LE(e.membership.epoch, 3u);
  EXPECT_EQ(e.membership.world_size, 3);
  EXPECT_EQ(e.membership.rank_to_slot[1], 1);
  std::vector<SlotId> moved = {e.membership.rank_to_slot[0], e.membership.rank_to_slot[2]};
  std::sort(moved.begin(), moved.end());
  EXPECT_EQ(moved, (std::vector<SlotId>{3, 4}));
  EXPECT_TRUE(e.membership.spares.empty());
  EXPECT_EQ(job.coord().membership().rank_to_slot, e.membership.rank_to_slot);
}

TEST(Coordinator, LostSpareLeavesThePool) {
  TestJob job(JobConfig{4, 2});
  ASSERT_TRUE(job.JoinAll());
  job.Kill(3);
  ControlEvent e = job.NextEvent(0, milliseconds(20000));
  EXPECT_EQ(e.type, ControlEvent::Type::kEpochChange);
  EXPECT_EQ(e.membership.epoch, 2u);  // a spare pool change is an epoch too
  EXPECT_TRUE(e.failed_ranks.empty());
  EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{0, 1}));
  EXPECT_EQ(e.membership.spares, std::vector<SlotId>{2});
  EXPECT_EQ(e.membership.retired, std::vector<SlotId>{3});
}

TEST(Coordinator, ASpareThatFailsItsHealthCheckLeavesThePoolAndTheNextTakesTheRank) {
  TestJob job(JobConfig{4, 2});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kUnhealthy, kNoRank, 0).ok());
  ControlEvent e = job.NextEvent(0);
  EXPECT_EQ(e.membership.epoch, 2u);
  EXPECT_TRUE(e.failed_ranks.empty());
  EXPECT_NE(e.reason.find("slot 2 (spare): health check failed, slot retired"), std::string::npos)
      << e.reason;
  EXPECT_EQ(e.membership.spares, std::vector<SlotId>{3});
  EXPECT_EQ(e.membership.retired, std::vector<SlotId>{2});
  EXPECT_EQ(job.NextEvent(2).assignment.role, Role::kRetired);
  // The next loss goes to the healthy spare.
  ASSERT_TRUE(job.agent(1).ReportFailure(FailureKind::kDeviceError, 1, 0).ok());
  e = job.EventAtLeast(3, 3);  // slot 3 heard of epoch 2 too
  EXPECT_EQ(e.assignment.role, Role::kActivated);
  EXPECT_EQ(e.assignment.rank, 1);
}

TEST(Coordinator, AnAgentCannotCallItsOwnRankAStraggler) {
  TestJob job(JobConfig{3, 1});
  ASSERT_TRUE(job.JoinAll());
  Status s = job.agent(1).ReportFailure(FailureKind::kStraggler, 1, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(job.coord().membership().epoch, 1u);
}

TEST(Coordinator, SparesExhaustedShrink) {
  JobConfig cfg{4, 1, 0, SparesExhaustedPolicy::kShrink};
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(0).ReportFailure(FailureKind::kDeviceError, 0, 0).ok());
  EXPECT_EQ(job.NextEvent(3).assignment.rank, 0);  // the spare took rank 0
  ASSERT_TRUE(job.agent(1).ReportFailure(FailureKind::kProcessCrash, 1, 0).ok());
  ControlEvent e = job.EventAtLeast(2, 3);
  EXPECT_EQ(e.type, ControlEvent::Type::kEpochChange);
  EXPECT_EQ(e.membership.world_size, 2);
  EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{3, 2}));
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{1});
  EXPECT_EQ(e.assignment.rank, 1);  // slot 2 was rank 2, now rank 1
  EXPECT_EQ(job.EventAtLeast(3, 3).assignment.rank, 0);
}

TEST(Coordinator, SparesExhaustedCheckpointAndExit) {
  JobConfig cfg{3, 0, 0, SparesExhaustedPolicy::kCheckpointAndExit};
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(1).ReportFailure(FailureKind::kDeviceError, 1, 0).ok());
  for (SlotId s : {0, 2}) {
    ControlEvent e = job.NextEvent(s);
    EXPECT_EQ(e.type, ControlEvent::Type::kShutdown);
    EXPECT_TRUE(e.checkpoint_first);
    EXPECT_EQ(e.exit_code, 0);
  }
  EXPECT_FALSE(job.coord().WaitJobEndFor(milliseconds(50)).has_value());
  ASSERT_TRUE(job.agent(0).ReportExit(0).ok());
  EXPECT_FALSE(job.coord().WaitJobEndFor(milliseconds(50)).has_value());
  ASSERT_TRUE(job.agent(2).ReportExit(0).ok());
  EXPECT_EQ(job.coord().WaitJobEndFor(milliseconds(3000)), std::optional<int>(0));
}

TEST(Coordinator, SparesExhaustedFail) {
  JobConfig cfg{3, 0, 0, SparesExhaustedPolicy::kFail};
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  job.Kill(2);
  ControlEvent e = job.NextEvent(0, milliseconds(20000));
  EXPECT_EQ(e.type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(job.coord().WaitJobEndFor(milliseconds(3000)), std::optional<int>(1));
}

TEST(Coordinator, JobEndsWithZeroWhenEveryRankFinished) {
  TestJob job(JobConfig{3, 1});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(0).ReportExit(0).ok());
  EXPECT_FALSE(job.coord().WaitJobEndFor(milliseconds(50)).has_value());
  ASSERT_TRUE(job.agent(1).ReportExit(0).ok());
  EXPECT_EQ(job.coord().WaitJobEndFor(milliseconds(3000)), std::optional<int>(0));
  for (SlotId s = 0; s < 3; ++s) {  // the spare too
    ControlEvent e = job.NextEvent(s);
    EXPECT_EQ(e.type, ControlEvent::Type::kShutdown);
    EXPECT_EQ(e.exit_code, 0);
    EXPECT_FALSE(e.checkpoint_first);
  }
}

TEST(Coordinator, JobEndsWithTheApplicationsNonZeroCode) {
  TestJob job(JobConfig{3, 1});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(1).ReportExit(7).ok());
  EXPECT_EQ(job.coord().WaitJobEndFor(milliseconds(3000)), std::optional<int>(7));
  ControlEvent e = job.NextEvent(2);
  EXPECT_EQ(e.type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(e.exit_code, 7);
}

TEST(Coordinator, KvPutGetBlockingGetAndTimeout) {
  TestJob job(JobConfig{2, 0});
  ASSERT_TRUE(job.JoinAll());
  const std::string binary("nccl\0id\xff", 8);
  ASSERT_TRUE(job.agent(0).KvPut("epoch1/nccl", binary).ok());
  auto got = job.agent(1).KvGet("epoch1/nccl", milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, binary);

  // A get that waits for a later put (the clock starts before the putter exists: a starved main
  // thread cannot make the wait look shorter).
  const auto start = Clock::now();
  std::thread putter([&] {
    std::this_thread::sleep_for(milliseconds(150));
    EXPECT_TRUE(job.agent(0).KvPut("late", "v").ok());
  });
  auto late = job.agent(1).KvGet("late", milliseconds(3000));
  putter.join();
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, "v");
  EXPECT_GE(Clock::now() - start, milliseconds(150));

  // A get that times out, on time.
  const auto t0 = Clock::now();
  auto missing = job.agent(0).KvGet("never", milliseconds(200));
  const auto waited = Clock::now() - t0;
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(waited, milliseconds(190));
  // Answered by the coordinator's timeout, not by the client giving up request_timeout (3 s)
  // later; the margin is for a loaded machine, not a figure.
  EXPECT_LT(waited, milliseconds(3000));
}

}  // namespace
}  // namespace rtft::control
