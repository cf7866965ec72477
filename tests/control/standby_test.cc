// The standby coordinator in one process (real CURVE sockets on 127.0.0.1, agents on threads):
// every change reaches the standby before its answer, the standby takes over when the primary is
// lost to it and to a majority of the agents (and not when only a minority lost it), requests in
// flight are answered by the new primary, a stopped primary that comes back steps down, a lost
// standby is replaced, the last exit ends the job when no standby is left to acknowledge it, and
// losing both ends the agents' wait on time.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "control/standby_test_util.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;
using testing::StandbyJob;
using testing::StandbyJobConfig;

TEST(Standby, EveryChangeReachesTheStandbyBeforeItsAnswer) {
  StandbyJob job(StandbyJobConfig{});
  ASSERT_TRUE(job.JoinAll());
  const SlotId sb = job.coord(0).stats().standby_slot;
  EXPECT_EQ(sb, 1) << "the lowest other slot (one host here)";
  EXPECT_TRUE(job.coord(sb).stats().synced);
  EXPECT_FALSE(job.coord(sb).is_primary());
  EXPECT_TRUE(job.coord(0).is_primary());
  ASSERT_TRUE(job.agent(2).KvPut("key", "value").ok());
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kProcessCrash, 2, 9).ok());
  // Acknowledged: the standby holds both (its copy of the membership shows the new epoch).
  EXPECT_EQ(job.coord(sb).membership().epoch, 2u);
  EXPECT_EQ(job.coord(0).membership().epoch, 2u);
  EXPECT_EQ(job.agent(3).generation(), 1u);
  EXPECT_EQ(job.agent(3).primary_slot(), 0);
}

TEST(Standby, TheStandbyTakesOverWhenThePrimaryIsLost) {
  StandbyJob job(StandbyJobConfig{});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(2).KvPut("before", "the takeover").ok());
  const auto lost_at = std::chrono::steady_clock::now();
  job.Lose(0);  // slot 0's dp-launch: the primary and rank 0's agent
  ControlEvent e = job.EventAtLeast(2, 2);
  const auto took = std::chrono::steady_clock::now() - lost_at;
  EXPECT_EQ(job.agent(2).generation(), 2u);
  EXPECT_EQ(job.agent(2).primary_slot(), 1);
  EXPECT_TRUE(job.coord(1).is_primary());
  EXPECT_EQ(job.coord(1).stats().takeovers, 1u);
  // Slot 0's rank went to the spare, as for any other slot.
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{0});
  EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{4, 1, 2, 3}));
  EXPECT_EQ(RoleOfSlot(e.membership, 0), Role::kRetired);
  EXPECT_EQ(job.EventAtLeast(4, 2).assignment.role, Role::kActivated);
  // Within about two heartbeat timeouts of the loss.
  EXPECT_LT(took, milliseconds(1500));
  // The store survived, and the new primary answers.
  auto v = job.agent(3).KvGet("before", milliseconds(1000));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "the takeover");
  // It chose a new standby among the live slots.
  EXPECT_TRUE(Eventually([&] { return job.coord(1).stats().standby_slot == 2; }));
  EXPECT_TRUE(Eventually([&] { return job.coord(2).stats().synced; }));
}

TEST(Standby, ARequestInFlightIsAnsweredByTheNewPrimary) {
  StandbyJob job(StandbyJobConfig{});
  ASSERT_TRUE(job.JoinAll());
  auto get = std::async(std::launch::async,
                        [&] { return job.agent(2).KvGet("later", milliseconds(8000)); });
  std::this_thread::sleep_for(milliseconds(50));
  job.Lose(0);
  ASSERT_TRUE(Eventually([&] { return job.agent(3).generation() == 2; }));
  ASSERT_TRUE(job.agent(3).KvPut("later", "put after the takeover").ok());
  auto v = get.get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "put after the takeover");
}

TEST(Standby, AMinorityThatLostThePrimaryMakesNoTakeover) {
  const std::string file = "/tmp/rtft-standby-partition-" + std::to_string(::getpid());
  StandbyJobConfig cfg;
  cfg.partition_file = file;
  StandbyJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  // The primary stops hearing (and answering) slot 3: slot 3 lost it and votes, alone.
  { std::ofstream(file) << "3\n"; }
  ControlEvent e = job.EventAtLeast(2, 2);
  std::remove(file.c_str());
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{3});
  EXPECT_EQ(e.membership.rank_to_slot, (std::vector<SlotId>{0, 1, 2, 4}));
  // Long enough for a takeover to have happened if a minority could make one.
  std::this_thread::sleep_for(milliseconds(900));
  EXPECT_EQ(job.coord(1).stats().takeovers, 0u);
  EXPECT_FALSE(job.coord(1).is_primary());
  EXPECT_TRUE(job.coord(0).is_primary());
  EXPECT_EQ(job.agent(2).generation(), 1u);
}

TEST(Standby, AStoppedPrimaryThatComesBackStepsDown) {
  std::atomic<bool> stop{false};
  StandbyJobConfig cfg;
  // Holds the primary's thread as SIGSTOP would hold its process.
  cfg.primary_fault_point = [&] {
    while (stop) std::this_thread::sleep_for(milliseconds(5));
  };
  StandbyJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  stop = true;
  ASSERT_TRUE(Eventually([&] { return job.coord(1).is_primary(); })) << "no takeover";
  ControlEvent e = job.EventAtLeast(3, 2);
  EXPECT_EQ(RoleOfSlot(e.membership, 0), Role::kRetired);
  stop = false;
  // Its first words reach the new primary, whose answer (of generation 2) fences it.
  ASSERT_TRUE(Eventually([&] { return job.coord(0).fenced(); })) << "the old primary goes on";
  EXPECT_FALSE(job.coord(0).is_primary());
  EXPECT_EQ(job.coord(0).WaitJobEndFor(milliseconds(100)).value_or(-1), 1);
  // Slot 0's agent, which the old primary can no longer answer, hears it was retired.
  auto ev = job.agent(0).WaitEvent(milliseconds(3000));
  bool retired = false;
  for (int i = 0; i < 20 && ev.ok() && !retired; ++i) {
    if (ev->has_value())
      retired =
          (*ev)->type == ControlEvent::Type::kShutdown || (*ev)->assignment.role == Role::kRetired;
    if (!retired) ev = job.agent(0).WaitEvent(milliseconds(300));
  }
  EXPECT_TRUE(retired) << "slot 0's agent was not told it was retired";
  // The job goes on under the new primary.
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kProcessCrash, 2, 1).ok());
  EXPECT_EQ(job.EventAtLeast(3, 3).membership.epoch, 3u);
}

TEST(Standby, ALostStandbyIsReplacedAndCostsNothingElse) {
  StandbyJob job(StandbyJobConfig{});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_EQ(job.coord(0).stats().standby_slot, 1);
  job.Lose(1);
  // Slot 1 is an ordinary lost slot, and slot 2 becomes the standby.
  ControlEvent e = job.EventAtLeast(2, 2);
  EXPECT_EQ(e.failed_ranks, std::vector<LogicalRank>{1});
  EXPECT_TRUE(Eventually([&] { return job.coord(0).stats().standby_slot == 2; }));
  EXPECT_TRUE(job.coord(2).stats().synced);
  EXPECT_EQ(job.agent(3).generation(), 1u);
  // The new standby can take over in turn.
  job.Lose(0);
  ASSERT_TRUE(Eventually([&] { return job.coord(2).is_primary(); }));
  // The spare went to rank 1: rank 0 has no slot left, and the job checkpoints and ends.
  ControlEvent end = job.EventAtLeast(3, 3);
  EXPECT_EQ(end.type, ControlEvent::Type::kShutdown);
  EXPECT_TRUE(end.checkpoint_first);
  EXPECT_EQ(end.membership.rank_to_slot, (std::vector<SlotId>{-1, 4, 2, 3}));
}

TEST(Standby, HalfTheSlotsLostWithTheStandbyLeaveThePrimaryDeciding) {
  // Four slots (three ranks and a spare): the standby's slot and another lost together leave the
  // primary hearing two of four. No standby can gather more than half of the votes, so the
  // primary goes on deciding: one of ranks 1 and 2 to the spare, the other without one. Which
  // loss it sees first is the heartbeats' race: the test waits for both, in either order.
  StandbyJobConfig cfg;
  cfg.slots = 4;
  cfg.heartbeat_timeout = milliseconds(1000);  // detection is not what this test times
  StandbyJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  ASSERT_EQ(job.coord(0).stats().standby_slot, 1);
  job.Lose(1);
  job.Lose(2);
  ASSERT_TRUE(Eventually(
      [&] {
        const Membership m = job.coord(0).membership();
        return RoleOfSlot(m, 1) == Role::kRetired && RoleOfSlot(m, 2) == Role::kRetired;
      },
      milliseconds(15000)))
      << "the primary did not retire both lost slots";
  EXPECT_FALSE(job.coord(0).fenced());
  EXPECT_TRUE(job.coord(0).is_primary());
  EXPECT_EQ(job.coord(0).stats().takeovers, 0u);
  const Membership m = job.coord(0).membership();
  ASSERT_EQ(m.rank_to_slot.size(), 3u);
  EXPECT_EQ(m.rank_to_slot[0], 0);
  const std::vector<SlotId> lost = {m.rank_to_slot[1], m.rank_to_slot[2]};
  EXPECT_TRUE(lost == (std::vector<SlotId>{3, -1}) || lost == (std::vector<SlotId>{-1, 3}))
      << "ranks 1 and 2 on slots " << lost[0] << " and " << lost[1];
  // The spare's slot is the standby now.
  EXPECT_TRUE(Eventually([&] { return job.coord(0).stats().standby_slot == 3; }));
}

// The slots whose applications ended leave (the standby's among them): nobody is left to
// acknowledge the last exit, which ends the job with its code all the same.
TEST(Standby, TheLastExitEndsTheJobWhenNoStandbyIsLeftToAcknowledgeIt) {
  StandbyJob job(StandbyJobConfig{});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_EQ(job.coord(0).stats().standby_slot, 1);
  for (SlotId s : {1, 2, 3}) ASSERT_TRUE(job.agent(s).ReportExit(0).ok()) << "slot " << s;
  for (SlotId s : {1, 2, 3}) job.Lose(s);  // their dp-launches end with their applications
  EXPECT_FALSE(job.coord(0).WaitJobEndFor(milliseconds(50)).has_value());
  ASSERT_TRUE(job.agent(0).ReportExit(0).ok());
  EXPECT_EQ(job.coord(0).WaitJobEndFor(milliseconds(3000)), std::optional<int>(0));
  EXPECT_TRUE(job.coord(0).is_primary());
}

TEST(Standby, LosingPrimaryAndStandbyEndsTheAgentsWaitOnTime) {
  StandbyJobConfig cfg;
  cfg.coordinator_timeout = milliseconds(1500);
  StandbyJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  const auto lost_at = std::chrono::steady_clock::now();
  job.LoseCoordinator(0);
  job.LoseCoordinator(1);
  StatusOr<std::optional<ControlEvent>> ev = std::optional<ControlEvent>();
  while (ev.ok() && std::chrono::steady_clock::now() - lost_at < milliseconds(5000))
    ev = job.agent(3).WaitEvent(milliseconds(100));
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ev.status().message().find("did not take over"), std::string::npos) << ev.status();
  EXPECT_LT(std::chrono::steady_clock::now() - lost_at, milliseconds(3000));
}

}  // namespace
}  // namespace rtft::control
