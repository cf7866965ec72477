// The primary's straggler detector alone (docs/protect.md, "Stragglers"), over the work samples
// it is given: which rank it names, when it has seen enough, and when it stays silent.
#include "control/coordinator/straggler_detector.h"

#include <gtest/gtest.h>

#include <vector>

namespace rtft::control {
namespace {

class StragglerDetectorTest : public ::testing::Test {
 protected:
  StragglerDetectorTest() : d_(StragglerOptions{}) { d_.Reset(kWorld); }

  // `beats` heartbeats from every rank, each covering `steps` steps of `ms[rank]` ms of work.
  void Beat(int beats, const std::vector<double>& ms, uint32_t steps = 8) {
    for (int b = 0; b < beats; ++b) {
      for (LogicalRank r = 0; r < kWorld; ++r)
        d_.Observe(r, StepWork{static_cast<uint64_t>(ms[r] * 1000 * steps), steps});
    }
  }

  static constexpr int kWorld = 4;
  StragglerDetector d_;
};

TEST_F(StragglerDetectorTest, ARankPersistentlySlowerThanThresholdIsNamedOnce) {
  Beat(10, {10, 10.4, 13, 9.8});  // rank 2: 30 % over its peers' median of 10 ms
  auto v = d_.Check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 2);
  EXPECT_NEAR(v->work_ms, 13, 1e-9);
  EXPECT_NEAR(v->peers_ms, 10, 1e-9);
  ASSERT_EQ(v->ranks.size(), 4u);
  EXPECT_NE(v->why.find("2=13.000"), std::string::npos) << v->why;
  // Named once per epoch; a new epoch starts over and needs a full window again.
  Beat(10, {10, 10.4, 13, 9.8});
  EXPECT_FALSE(d_.Check().has_value());
  d_.Reset(kWorld);
  EXPECT_FALSE(d_.Check().has_value());
  Beat(10, {10, 10.4, 13, 9.8});
  EXPECT_TRUE(d_.Check().has_value());
}

TEST_F(StragglerDetectorTest, WithinTheThresholdNobodyIsNamed) {
  Beat(20, {10, 11.5, 10.5, 9.9});  // 15 % at most
  EXPECT_FALSE(d_.Check().has_value());
}

TEST_F(StragglerDetectorTest, NothingBeforeEveryRankHasAFullWindow) {
  // 50 steps and 5 heartbeats make a window: 4 beats of 8 steps are not enough, nor are 50
  // steps in 2 beats.
  Beat(4, {10, 10, 30, 10});
  EXPECT_FALSE(d_.Check().has_value());
  d_.Reset(kWorld);
  Beat(2, {10, 10, 30, 10}, 40);
  EXPECT_FALSE(d_.Check().has_value());
  // Rank 3 silent (no heartbeat with work yet): nobody is judged.
  d_.Reset(kWorld);
  for (int b = 0; b < 10; ++b) {
    for (LogicalRank r = 0; r < 3; ++r)
      d_.Observe(r, StepWork{uint64_t(r == 2 ? 30 : 10) * 8000, 8});
  }
  EXPECT_FALSE(d_.Check().has_value());
}

TEST_F(StragglerDetectorTest, ABurstIsNotASlowRank) {
  // Rank 1 descheduled for two heartbeats out of the window: its median stays with its peers.
  Beat(4, {10, 10, 10, 10});
  Beat(1, {10, 60, 10, 10});
  Beat(1, {10, 40, 10, 10});
  Beat(4, {10, 10, 10, 10});
  EXPECT_FALSE(d_.Check().has_value());
}

TEST_F(StragglerDetectorTest, OnlyTheNewestWindowCounts) {
  // Slow long ago, then like its peers for a full window: not a straggler now.
  Beat(20, {10, 10, 20, 10});
  Beat(10, {10, 10, 10, 10});
  EXPECT_FALSE(d_.Check().has_value());
  // And the other way round.
  Beat(10, {10, 10, 10, 15});
  auto v = d_.Check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 3);
}

TEST_F(StragglerDetectorTest, TwoRanksCompareWithEachOther) {
  StragglerDetector two(StragglerOptions{});
  two.Reset(2);
  for (int b = 0; b < 10; ++b) {
    two.Observe(0, StepWork{10 * 8000, 8});
    two.Observe(1, StepWork{12500 * 8, 8});  // 25 % over its one peer
  }
  auto v = two.Check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 1);
}

TEST_F(StragglerDetectorTest, OnAGridARankIsComparedWithItsReplicasOnly) {
  // 2 x 2 tensor x pipeline, 2 replicas: ranks t + 2 * (d + 2 * p). The last stage (p = 1: ranks
  // 4..7) works 50 % more than the first, as stages may: nobody is slow.
  StragglerDetector grid(StragglerOptions{});
  grid.Reset(8, 2, 2);
  auto beat = [&](double slow_rank_ms) {
    for (int b = 0; b < 10; ++b) {
      for (LogicalRank r = 0; r < 8; ++r) {
        const double ms = r == 5 ? slow_rank_ms : r >= 4 ? 15 : 10;
        grid.Observe(r, StepWork{static_cast<uint64_t>(ms * 8000), 8});
      }
    }
  };
  beat(15);
  EXPECT_FALSE(grid.Check().has_value());
  // Rank 5 (t 1, d 0, p 1) 30 % over its one replica, rank 7 (t 1, d 1, p 1).
  grid.Reset(8, 2, 2);
  beat(19.5);
  auto v = grid.Check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 5);
  EXPECT_NEAR(v->peers_ms, 15, 1e-9);
  // A world that is no such grid: one group (and the stages' difference is then a straggler).
  grid.Reset(6, 2, 2);
  for (int b = 0; b < 10; ++b) {
    for (LogicalRank r = 0; r < 6; ++r)
      grid.Observe(r, StepWork{uint64_t(r == 5 ? 15 : 10) * 8000, 8});
  }
  v = grid.Check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 5);
}

TEST_F(StragglerDetectorTest, OffAndMalformedInputIsIgnored) {
  StragglerDetector off(StragglerOptions{0, 50});
  off.Reset(kWorld);
  for (int b = 0; b < 20; ++b) {
    for (LogicalRank r = 0; r < kWorld; ++r)
      off.Observe(r, StepWork{uint64_t(r == 0 ? 90 : 10) * 8000, 8});
  }
  EXPECT_FALSE(off.Check().has_value());
  // Ranks outside the world and samples with no steps change nothing.
  d_.Observe(-1, StepWork{1000, 1});
  d_.Observe(kWorld, StepWork{1000, 1});
  d_.Observe(0, StepWork{1000000, 0});
  Beat(10, {10, 10, 10, 10});
  EXPECT_FALSE(d_.Check().has_value());
  // A single rank has no peers.
  StragglerDetector one(StragglerOptions{});
  one.Reset(1);
  for (int b = 0; b < 20; ++b) one.Observe(0, StepWork{80000, 8});
  EXPECT_FALSE(one.Check().has_value());
}

}  // namespace
}  // namespace rtft::control
