// The coordinator's decisions without sockets: classification, spares, policies, job end.
#include <gtest/gtest.h>

#include "control/coordinator/membership_table.h"

namespace rtft::control {
namespace {

TableOptions Opts(int slots, int spares, int restarts, SparesExhaustedPolicy p) {
  return {slots, spares, restarts, p};
}
constexpr auto kCkpt = SparesExhaustedPolicy::kCheckpointAndExit;

TEST(MembershipTable, InitialAssignment) {
  MembershipTable t(Opts(6, 2, 3, kCkpt));
  const Membership& m = t.membership();
  EXPECT_EQ(m.epoch, 1u);
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.rank_to_slot, (std::vector<SlotId>{0, 1, 2, 3}));
  EXPECT_EQ(m.spares, (std::vector<SlotId>{4, 5}));
  EXPECT_EQ(RoleOfSlot(m, 4), Role::kSpare);
  EXPECT_EQ(RankOfSlot(m, 2), 2);
  EXPECT_EQ(RankOfSlot(m, 5), kNoRank);
}

TEST(MembershipTable, NoDevicesWithoutGpus) {
  MembershipTable t(Opts(3, 1, 3, kCkpt));
  for (SlotId s = 0; s < 3; ++s) t.Join(s, "n1", -1, 0);
  EXPECT_TRUE(t.membership().devices.empty());
  Decision d = t.Fail({{1, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_TRUE(d.event->membership.devices.empty());
}

// The device travels with the rank (docs/launcher.md, "GPUs").
TEST(MembershipTable, TheSpareTakesTheLostSlotsGpuOnItsNode) {
  MembershipTable t(Opts(6, 2, 3, kCkpt));
  for (SlotId s = 0; s < 6; ++s) t.Join(s, "n1", s % 2, 2);
  EXPECT_EQ(t.membership().devices, (std::vector<int32_t>{0, 1, 0, 1}));
  // Slot 1 (device 1) lost: spare slot 4, whose own device is 0, gets device 1.
  Decision d = t.Fail({{1, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 4, 2, 3}));
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 0, 1}));
  // A crash restarts the rank on its slot with its device.
  d = t.Fail({{4, FailureKind::kProcessCrash, 9}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 0, 1}));
  // Two lost at once: each spare takes its own lost slot's GPU.
  MembershipTable u(Opts(6, 2, 3, kCkpt));
  for (SlotId s = 0; s < 6; ++s) u.Join(s, "n1", s % 2, 2);
  d = u.Fail({{2, FailureKind::kSlotLost, 0}, {3, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 1, 4, 5}));
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 0, 1}));
}

TEST(MembershipTable, OnAnotherNodeTheSpareTakesAFreeGpuElseItsOwn) {
  // n1: slots 0, 1 (devices 0, 1); n2: slots 2, 3 (devices 0, 1) and spares 4, 5 (their own
  // devices 0 and 1, both held by slots 2 and 3).
  MembershipTable t(Opts(6, 2, 3, kCkpt));
  const char* host[] = {"n1", "n1", "n2", "n2", "n2", "n2"};
  const int32_t local[] = {0, 1, 0, 1, 2, 3};
  for (SlotId s = 0; s < 6; ++s) t.Join(s, host[s], local[s] % 2, 2);
  // Slot 0 lost on n1: spare 4 on n2 finds no free GPU there and keeps its own, device 0.
  Decision d = t.Fail({{0, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{4, 1, 2, 3}));
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(t.member(4).device, 0);
  // Slot 3 (n2, device 1) lost: spare 5 is on n2, and takes device 1 (not a GPU shared with
  // slot 2 and 4).
  d = t.Fail({{3, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{4, 1, 2, 5}));
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 0, 1}));

  // A GPU freed on the spare's node is taken: slot 0 (n1) and slot 2 (n2, device 0) lost
  // together, one spare (slot 4 on n2, its own device 1): rank 0 goes to it, on device 0, which
  // slot 2 freed; rank 2 finds no spare and the job shrinks.
  const char* host2[] = {"n1", "n1", "n2", "n2", "n2"};
  const int32_t dev2[] = {0, 1, 0, 1, 1};
  MembershipTable v(Opts(5, 1, 3, SparesExhaustedPolicy::kShrink));
  for (SlotId s = 0; s < 5; ++s) v.Join(s, host2[s], dev2[s], 2);
  d = v.Fail({{0, FailureKind::kSlotLost, 0}, {2, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{4, 1, 3}));
  EXPECT_EQ(d.event->membership.devices, (std::vector<int32_t>{0, 1, 1}));
  // Hostile or inconsistent joins give no device.
  MembershipTable u(Opts(5, 1, 3, kCkpt));
  for (SlotId s = 0; s < 5; ++s) u.Join(s, host2[s], dev2[s], 2);
  u.Join(1, "n1", 5, 2);
  u.Join(2, "n2", -1, 4);
  u.Join(9, "n9", 0, 1);  // no such slot: ignored
  EXPECT_EQ(u.member(1).device, -1);
  EXPECT_EQ(u.member(2).device, -1);
  EXPECT_EQ(u.membership().devices, (std::vector<int32_t>{0, -1, -1, 1}));
}

TEST(MembershipTable, ADedicatedCoordinatorSlotHoldsNoRankAndCannotFail) {
  TableOptions o = Opts(5, 1, 3, kCkpt);
  o.coordinator_slots = 1;
  MembershipTable t(o);
  const Membership& m = t.membership();
  EXPECT_EQ(m.world_size, 3);
  EXPECT_EQ(m.rank_to_slot, (std::vector<SlotId>{1, 2, 3}));
  EXPECT_EQ(m.spares, (std::vector<SlotId>{4}));
  EXPECT_EQ(RoleOfSlot(m, 0), Role::kCoordinator);
  EXPECT_EQ(RankOfSlot(m, 0), kNoRank);
  EXPECT_FALSE(t.has_agent(0));
  EXPECT_FALSE(t.Fail({{0, FailureKind::kSlotLost, 0}}).event);
  EXPECT_FALSE(t.Exit(0, 3).event);
  // Rank 0's slot lost: the spare takes it, as for any other rank.
  Decision d = t.Fail({{1, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{4, 2, 3}));
  EXPECT_EQ(RoleOfSlot(d.event->membership, 0), Role::kCoordinator);
  // The job ends when every rank exited, slot 0 not counted.
  for (SlotId s : {2, 3}) EXPECT_FALSE(t.Exit(s, 0).job_exit_code);
  EXPECT_EQ(t.Exit(4, 0).job_exit_code.value_or(-1), 0);
}

TEST(MembershipTable, CrashesAreTransientUntilTheLimit) {
  MembershipTable t(Opts(3, 1, 2, kCkpt));
  for (int i = 1; i <= 2; ++i) {
    Decision d = t.Fail({{1, FailureKind::kProcessCrash, 11}});
    ASSERT_TRUE(d.event);
    EXPECT_EQ(d.event->membership.epoch, 1u + i);
    EXPECT_EQ(RoleOfSlot(d.event->membership, 1), Role::kRestarted);
    EXPECT_EQ(t.member(1).restarts, i);
  }
  Decision d = t.Fail({{1, FailureKind::kHang, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 2}));
  EXPECT_EQ(RoleOfSlot(d.event->membership, 2), Role::kActivated);
  EXPECT_EQ(RoleOfSlot(d.event->membership, 1), Role::kRetired);
  EXPECT_NE(d.event->reason.find("repeated"), std::string::npos);
  // A retired slot's later reports change nothing.
  EXPECT_FALSE(t.Fail({{1, FailureKind::kProcessCrash, 0}}).event);
}

// A corrupt copy is repaired in place once (a restart's worth, the rank stays); the slot whose
// copy is corrupt a second time is retired and the spare takes its rank, whatever restarts are
// left (docs/protect.md, "Silent data corruption").
TEST(MembershipTable, ACopyFoundCorruptTwiceRetiresItsSlot) {
  MembershipTable t(Opts(3, 1, 3, kCkpt));
  Decision d = t.Fail({{1, FailureKind::kCorrupt, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 1}));
  EXPECT_TRUE(d.event->failed_ranks.empty());
  EXPECT_NE(d.event->reason.find("silent data corruption, recovered in place (restart 1/3)"),
            std::string::npos)
      << d.event->reason;
  EXPECT_EQ(t.member(1).corruptions, 1);
  // A crash between the two is a restart as usual; it does not count as a corruption.
  d = t.Fail({{1, FailureKind::kProcessCrash, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(RoleOfSlot(d.event->membership, 1), Role::kRestarted);
  d = t.Fail({{1, FailureKind::kCorrupt, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 2}));
  EXPECT_EQ(RoleOfSlot(d.event->membership, 1), Role::kRetired);
  EXPECT_EQ(RoleOfSlot(d.event->membership, 2), Role::kActivated);
  EXPECT_NE(d.event->reason.find("silent data corruption again (2 times), slot retired"),
            std::string::npos)
      << d.event->reason;
  // Another slot's first corruption is its own first.
  d = t.Fail({{0, FailureKind::kCorrupt, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 2}));
}

TEST(MembershipTable, SpareFailures) {
  MembershipTable t(Opts(4, 2, 1, kCkpt));
  Decision d = t.Fail({{3, FailureKind::kProcessCrash, 0}});
  ASSERT_TRUE(d.event);  // restarted in standby; still a spare
  EXPECT_EQ(d.event->membership.spares, (std::vector<SlotId>{2, 3}));
  EXPECT_TRUE(d.event->failed_ranks.empty());
  d = t.Fail({{2, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.spares, std::vector<SlotId>{3});
  EXPECT_EQ(d.event->membership.epoch, 3u);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 1}));
}

TEST(MembershipTable, SimultaneousFailuresShareOneEpoch) {
  MembershipTable t(Opts(6, 2, 0, kCkpt));
  Decision d = t.Fail({{3, FailureKind::kSlotLost, 0},
                       {0, FailureKind::kDeviceError, 0},
                       {3, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.epoch, 2u);
  EXPECT_EQ(d.event->failed_ranks, (std::vector<LogicalRank>{0, 3}));
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{4, 1, 2, 5}));
}

TEST(MembershipTable, ShrinkRenumbersDensely) {
  MembershipTable t(Opts(4, 0, 0, SparesExhaustedPolicy::kShrink));
  Decision d = t.Fail({{1, FailureKind::kSlotLost, 0}, {2, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kEpochChange);
  EXPECT_EQ(d.event->membership.world_size, 2);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 3}));
  EXPECT_EQ(d.event->failed_ranks, (std::vector<LogicalRank>{1, 2}));
  EXPECT_EQ(t.member(3).rank, 1);
  // The last two go: nothing left to run.
  d = t.Fail({{0, FailureKind::kSlotLost, 0}, {3, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(1));
}

TEST(MembershipTable, AShrinkOfAGridDropsTheWholeReplicaAndItsRanksBecomeSpares) {
  // 2 x 2 x 2: ranks t + 2 (d + 2 p); rank 7 is (1, 1, 1), its replica d = 1 is ranks 2, 3, 6, 7.
  TableOptions o = Opts(8, 0, 0, SparesExhaustedPolicy::kShrink);
  o.grid_tensor = 2;
  o.grid_pipeline = 2;
  MembershipTable t(o);
  Decision d = t.Fail({{7, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kEpochChange);
  EXPECT_EQ(d.event->membership.world_size, 4);
  // Replica 0 stays: (t, p) kept, rank t + 2 (0 + 1 p).
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 1, 4, 5}));
  EXPECT_EQ(d.event->membership.spares, (std::vector<SlotId>{2, 3, 6}));
  EXPECT_EQ(RoleOfSlot(d.event->membership, 3), Role::kSpare);
  EXPECT_EQ(RoleOfSlot(d.event->membership, 7), Role::kRetired);
  EXPECT_EQ(d.event->failed_ranks, (std::vector<LogicalRank>{7}));
  EXPECT_NE(d.event->reason.find("join the spare pool"), std::string::npos) << d.event->reason;
  // A second loss is taken by one of those spares, in its rank's place.
  d = t.Fail({{5, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{0, 1, 4, 2}));
  EXPECT_EQ(RoleOfSlot(d.event->membership, 2), Role::kActivated);
  EXPECT_EQ(t.member(2).rank, 3);
}

TEST(MembershipTable, AShrinkOfAGridThatLosesEveryReplicaEndsTheJob) {
  TableOptions o = Opts(4, 0, 0, SparesExhaustedPolicy::kShrink);
  o.grid_tensor = 2;  // 2 x 1 x 2: replica 0 is ranks 0, 1; replica 1 ranks 2, 3
  MembershipTable t(o);
  Decision d = t.Fail({{1, FailureKind::kSlotLost, 0}, {2, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(1));
}

TEST(MembershipTable, DropReplicasRenumbersLargeGridsAndRefusesBadInput) {
  // 64 x 16 x 128 on paper: replicas 0, 5 and 127 leave.
  const int32_t T = 64, P = 16, D = 128, world = T * P * D;
  auto rank = [&](int t, int p, int d, int dd) { return t + T * (d + dd * p); };
  auto drop = DropReplicas(
      T, P, world, {rank(3, 7, 5, D), rank(0, 0, 0, D), rank(63, 15, 127, D), rank(1, 1, 5, D)});
  ASSERT_TRUE(drop);
  EXPECT_EQ(drop->left, (std::vector<int32_t>{0, 5, 127}));
  EXPECT_EQ(drop->data, D - 3);
  EXPECT_EQ(drop->new_of_old[rank(2, 3, 0, D)], -1);
  EXPECT_EQ(drop->new_of_old[rank(2, 3, 5, D)], -1);
  EXPECT_EQ(drop->new_of_old[rank(2, 3, 1, D)], rank(2, 3, 0, D - 3));
  EXPECT_EQ(drop->new_of_old[rank(2, 3, 6, D)], rank(2, 3, 4, D - 3));
  EXPECT_EQ(drop->new_of_old[rank(63, 15, 126, D)], rank(63, 15, 124, D - 3));
  std::vector<int32_t> seen(static_cast<size_t>(T) * P * (D - 3), 0);
  for (int32_t n : drop->new_of_old)
    if (n >= 0) ++seen.at(n);
  for (int32_t c : seen) EXPECT_EQ(c, 1);
  EXPECT_FALSE(DropReplicas(2, 2, 6, {0}));   // 4 does not divide 6
  EXPECT_FALSE(DropReplicas(2, 2, 8, {8}));   // outside the world
  EXPECT_FALSE(DropReplicas(0, 2, 8, {1}));   // no degree 0
  EXPECT_FALSE(DropReplicas(2, 2, 8, {-1}));  // a rank below 0
}

TEST(MembershipTable, CheckpointAndExitWaitsForEveryRank) {
  MembershipTable t(Opts(3, 0, 0, kCkpt));
  Decision d = t.Fail({{0, FailureKind::kSlotLost, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kShutdown);
  EXPECT_TRUE(d.event->checkpoint_first);
  EXPECT_EQ(d.event->membership.rank_to_slot, (std::vector<SlotId>{-1, 1, 2}));
  EXPECT_FALSE(t.Exit(1, 0).job_exit_code);
  d = t.Exit(2, 0);
  EXPECT_FALSE(d.event);  // the shutdown was already announced
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(0));
  EXPECT_TRUE(t.over());
}

TEST(MembershipTable, CheckpointAndExitFailsWhenAnotherRankIsLostMeanwhile) {
  MembershipTable t(Opts(3, 0, 3, kCkpt));
  ASSERT_TRUE(t.Fail({{0, FailureKind::kDeviceError, 0}}).event);
  EXPECT_FALSE(t.Exit(1, 0).job_exit_code);
  // A crash while draining is not restarted; the job ends with an error.
  Decision d = t.Fail({{2, FailureKind::kProcessCrash, 0}});
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(1));
}

TEST(MembershipTable, FailPolicy) {
  MembershipTable t(Opts(2, 0, 0, SparesExhaustedPolicy::kFail));
  Decision d = t.Fail({{1, FailureKind::kDeviceError, 0}});
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(d.event->exit_code, 1);
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(1));
  EXPECT_FALSE(t.Fail({{0, FailureKind::kDeviceError, 0}}).event);  // over: nothing more
}

TEST(MembershipTable, JobEnd) {
  MembershipTable t(Opts(3, 1, 0, kCkpt));
  Decision spare = t.Exit(2, 0);  // a spare's exit is not the job's; the spare leaves the pool
  EXPECT_FALSE(spare.job_exit_code);
  ASSERT_TRUE(spare.event);
  EXPECT_TRUE(spare.event->membership.spares.empty());
  EXPECT_EQ(spare.event->membership.retired, std::vector<SlotId>{2});
  EXPECT_FALSE(t.Exit(0, 0).job_exit_code);
  // A finished slot that goes silent is not a failure.
  EXPECT_FALSE(t.Fail({{0, FailureKind::kSlotLost, 0}}).event);
  Decision d = t.Exit(1, 0);
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->type, ControlEvent::Type::kShutdown);
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(0));

  MembershipTable u(Opts(3, 1, 0, kCkpt));
  d = u.Exit(1, 42);
  ASSERT_TRUE(d.event);
  EXPECT_EQ(d.event->exit_code, 42);
  EXPECT_EQ(d.job_exit_code, std::optional<int32_t>(42));
}

}  // namespace
}  // namespace rtft::control
