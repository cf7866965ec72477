// The primary's straggler detector alone (docs/protect.md, "Stragglers"), over the work samples
// it is given: which rank it names, when it has seen enough, and when it stays silent.
#include "control/coordinator/straggler_detector.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace rtft::control {
namespace {

class StragglerDetectorTest : public ::testing::Test {
 protected:
  StragglerDetectorTest() : d_(StragglerOptions{20, 50, 0}) { d_.Reset(kWorld); }

  // `beats` heartbeats from every rank, each covering `steps` steps of `ms[rank]` ms of work,
  // checked after each round as the primary does at every scan: the first verdict, and the
  // round (1-based) it came at.
  std::optional<StragglerDetector::Verdict> Beat(int beats, const std::vector<double>& ms,
                                                 uint32_t steps = 8, int* at = nullptr) {
    std::optional<StragglerDetector::Verdict> first;
    for (int b = 0; b < beats; ++b) {
      for (LogicalRank r = 0; r < kWorld; ++r)
        d_.Observe(r, StepWork{static_cast<uint64_t>(ms[r] * 1000 * steps), steps});
      auto v = d_.Check();
      if (v && !first) {
        first = v;
        if (at) *at = b + 1;
      }
    }
    return first;
  }

  static constexpr int kWorld = 4;
  StragglerDetector d_;
};

TEST_F(StragglerDetectorTest, ARankPersistentlySlowerThanThresholdIsNamedOnce) {
  // Rank 2: 30 % over its peers' median of 10 ms. Its window is full at the 7th round (56
  // steps), where it is first seen past the threshold; named once past it for 50 more steps,
  // at the 14th (112 steps).
  int at = 0;
  auto v = Beat(20, {10, 10.4, 13, 9.8}, 8, &at);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(at, 14);
  EXPECT_NE(v->why.find("past it for 56 steps"), std::string::npos) << v->why;
  EXPECT_EQ(v->rank, 2);
  EXPECT_NEAR(v->work_ms, 13, 1e-9);
  EXPECT_NEAR(v->peers_ms, 10, 1e-9);
  ASSERT_EQ(v->ranks.size(), 4u);
  EXPECT_NE(v->why.find("2=13.000"), std::string::npos) << v->why;
  // Named once per epoch; a new epoch starts over and needs two windows again.
  EXPECT_FALSE(Beat(20, {10, 10.4, 13, 9.8}).has_value());
  d_.Reset(kWorld);
  EXPECT_FALSE(d_.Check().has_value());
  EXPECT_FALSE(Beat(13, {10, 10.4, 13, 9.8}).has_value());
  EXPECT_TRUE(Beat(1, {10, 10.4, 13, 9.8}).has_value());
}

// Past the threshold at one check and under it at the next starts the further window over: a
// rank the scheduler leaves behind now and then is never named.
TEST_F(StragglerDetectorTest, ARankThatDipsUnderTheThresholdStartsOver) {
  // A window is 7 heartbeats of 8 steps here (the newest that cover 50 steps).
  EXPECT_FALSE(Beat(7, {10, 10, 13, 10}).has_value());  // first seen past it
  EXPECT_FALSE(Beat(3, {10, 10, 13, 10}).has_value());  // 24 more steps
  // Like its peers from then: its window's median is under the threshold after 4 such beats,
  // 48 steps after it was first seen past it.
  EXPECT_FALSE(Beat(7, {10, 10, 10, 10}).has_value());
  int at = 0;
  auto v = Beat(30, {10, 10, 13, 10}, 8, &at);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 2);
  // The median is past the threshold again after 4 of its slow beats (4 of 7 in the window),
  // and named 50 steps (7 beats) later, not 10 steps after the slowness came back.
  EXPECT_EQ(at, 4 + 7);
  // A rank over and under by turns, every other heartbeat, is never named.
  d_.Reset(kWorld);
  for (int b = 0; b < 40; ++b)
    EXPECT_FALSE(Beat(1, {10, 10, b % 14 < 7 ? 13.0 : 10.0, 10}).has_value()) << b;
}

TEST_F(StragglerDetectorTest, WithinTheThresholdNobodyIsNamed) {
  EXPECT_FALSE(Beat(40, {10, 11.5, 10.5, 9.9}).has_value());  // 15 % at most
}

TEST_F(StragglerDetectorTest, NothingBeforeEveryRankHasAFullWindow) {
  // 50 steps and 5 heartbeats make a window: 4 beats of 8 steps are not enough, nor are 50
  // steps in 2 beats.
  EXPECT_FALSE(Beat(4, {10, 10, 30, 10}).has_value());
  d_.Reset(kWorld);
  EXPECT_FALSE(Beat(2, {10, 10, 30, 10}, 40).has_value());
  // Rank 3 silent (no heartbeat with work yet): nobody is judged.
  d_.Reset(kWorld);
  for (int b = 0; b < 20; ++b) {
    for (LogicalRank r = 0; r < 3; ++r)
      d_.Observe(r, StepWork{uint64_t(r == 2 ? 30 : 10) * 8000, 8});
    EXPECT_FALSE(d_.Check().has_value());
  }
}

TEST_F(StragglerDetectorTest, ABurstIsNotASlowRank) {
  // Rank 1 descheduled for two heartbeats out of the window: its median stays with its peers.
  EXPECT_FALSE(Beat(4, {10, 10, 10, 10}).has_value());
  EXPECT_FALSE(Beat(1, {10, 60, 10, 10}).has_value());
  EXPECT_FALSE(Beat(1, {10, 40, 10, 10}).has_value());
  EXPECT_FALSE(Beat(20, {10, 10, 10, 10}).has_value());
}

TEST_F(StragglerDetectorTest, OnlyTheNewestWindowCounts) {
  // Slow for less than two windows long ago, then like its peers: not a straggler.
  EXPECT_FALSE(Beat(10, {10, 10, 20, 10}).has_value());
  EXPECT_FALSE(Beat(20, {10, 10, 10, 10}).has_value());
  // And the other way round.
  auto v = Beat(20, {10, 10, 10, 15});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 3);
}

TEST_F(StragglerDetectorTest, TwoRanksCompareWithEachOther) {
  StragglerDetector two(StragglerOptions{20, 50, 0});
  two.Reset(2);
  std::optional<StragglerDetector::Verdict> v;
  for (int b = 0; b < 20 && !v; ++b) {
    two.Observe(0, StepWork{10 * 8000, 8});
    two.Observe(1, StepWork{12500 * 8, 8});  // 25 % over its one peer
    v = two.Check();
  }
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 1);
}

TEST_F(StragglerDetectorTest, OnAGridARankIsComparedWithItsReplicasOnly) {
  // 2 x 2 tensor x pipeline, 2 replicas: ranks t + 2 * (d + 2 * p). The last stage (p = 1: ranks
  // 4..7) works 50 % more than the first, as stages may: nobody is slow.
  StragglerDetector grid(StragglerOptions{20, 50, 0});
  grid.Reset(8, 2, 2);
  auto beat = [&](double slow_rank_ms) {
    std::optional<StragglerDetector::Verdict> v;
    for (int b = 0; b < 20 && !v; ++b) {
      for (LogicalRank r = 0; r < 8; ++r) {
        const double ms = r == 5 ? slow_rank_ms : r >= 4 ? 15 : 10;
        grid.Observe(r, StepWork{static_cast<uint64_t>(ms * 8000), 8});
      }
      v = grid.Check();
    }
    return v;
  };
  EXPECT_FALSE(beat(15).has_value());
  // Rank 5 (t 1, d 0, p 1) 30 % over its one replica, rank 7 (t 1, d 1, p 1).
  grid.Reset(8, 2, 2);
  auto v = beat(19.5);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 5);
  EXPECT_NEAR(v->peers_ms, 15, 1e-9);
  // A world that is no such grid: one group (and the stages' difference is then a straggler).
  grid.Reset(6, 2, 2);
  v.reset();
  for (int b = 0; b < 20 && !v; ++b) {
    for (LogicalRank r = 0; r < 6; ++r)
      grid.Observe(r, StepWork{uint64_t(r == 5 ? 15 : 10) * 8000, 8});
    v = grid.Check();
  }
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 5);
}

// With steps of milliseconds a window of steps is under a second: the default also asks for 5 s of
// the rank's own work past the threshold. Rank 2 at 13 ms: 385 steps past it (49 rounds of 8
// after the 7 that fill its window), not the 56 steps that a window alone asks for.
TEST_F(StragglerDetectorTest, FastStepsMustStayPastTheThresholdForFiveSecondsOfWork) {
  StragglerDetector d(StragglerOptions{});
  d.Reset(kWorld);
  int at = 0;
  for (int b = 0; b < 80 && at == 0; ++b) {
    const std::vector<double> ms = {10, 10.4, 13, 9.8};
    for (LogicalRank r = 0; r < kWorld; ++r)
      d.Observe(r, StepWork{static_cast<uint64_t>(ms[r] * 1000 * 8), 8});
    if (auto v = d.Check()) {
      at = b + 1;
      EXPECT_EQ(v->rank, 2);
      EXPECT_NE(v->why.find("past it for 392 steps"), std::string::npos) << v->why;
    }
  }
  EXPECT_EQ(at, 56);
  // A slow spell shorter than that names nobody: 30 rounds past it, then even again.
  d.Reset(kWorld);
  for (int b = 0; b < 80; ++b) {
    const std::vector<double> ms = {10, 10.4, b < 37 ? 13 : 10.1, 9.8};
    for (LogicalRank r = 0; r < kWorld; ++r)
      d.Observe(r, StepWork{static_cast<uint64_t>(ms[r] * 1000 * 8), 8});
    EXPECT_FALSE(d.Check().has_value()) << "round " << b + 1;
  }
}

TEST_F(StragglerDetectorTest, OffAndMalformedInputIsIgnored) {
  StragglerDetector off(StragglerOptions{0, 50, 0});
  off.Reset(kWorld);
  for (int b = 0; b < 20; ++b) {
    for (LogicalRank r = 0; r < kWorld; ++r)
      off.Observe(r, StepWork{uint64_t(r == 0 ? 90 : 10) * 8000, 8});
    EXPECT_FALSE(off.Check().has_value());
  }
  // Ranks outside the world and samples with no steps change nothing.
  d_.Observe(-1, StepWork{1000, 1});
  d_.Observe(kWorld, StepWork{1000, 1});
  d_.Observe(0, StepWork{1000000, 0});
  EXPECT_FALSE(Beat(20, {10, 10, 10, 10}).has_value());
  // A single rank has no peers.
  StragglerDetector one(StragglerOptions{20, 50, 0});
  one.Reset(1);
  for (int b = 0; b < 20; ++b) {
    one.Observe(0, StepWork{80000, 8});
    EXPECT_FALSE(one.Check().has_value());
  }
}

}  // namespace
}  // namespace rtft::control
