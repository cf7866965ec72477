// The primary's hang detector alone (docs/protect.md, "Hangs"), over times it is given: which
// rank it blames, after how long, and when it stays silent.
#include "control/coordinator/hang_detector.h"

#include <gtest/gtest.h>

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using Clock = HangDetector::Clock;

CallProgress Sample(uint64_t calls, bool in_call, int32_t peer = -1, int64_t age_ms = 10,
                    bool long_phase = false) {
  CallProgress p;
  p.calls = calls;
  p.in_call = in_call;
  p.peer = peer;
  p.age_ms = age_ms;
  p.long_phase = long_phase;
  return p;
}

class HangDetectorTest : public ::testing::Test {
 protected:
  HangDetectorTest() : d_(HangOptions{}) { d_.Reset(kWorld, t_); }

  // `steps` steps of `step_ms` each on every rank, heard every step (calls advance too).
  void Train(int steps, int64_t step_ms = 100) {
    for (int s = 0; s < steps; ++s) {
      t_ += milliseconds(step_ms);
      ++step_;
      for (LogicalRank r = 0; r < kWorld; ++r) d_.Observe(r, step_, Sample(step_ * 4, false), t_);
      EXPECT_FALSE(d_.Check(t_).has_value());
    }
  }
  // Heartbeats every 100 ms for `ms`: `progress(rank)` is what each says; the first verdict.
  template <typename Fn>
  std::optional<HangDetector::Verdict> Wait(int64_t ms, Fn progress,
                                            int64_t* seen_after = nullptr) {
    for (int64_t waited = 100; waited <= ms; waited += 100) {
      t_ += milliseconds(100);
      for (LogicalRank r = 0; r < kWorld; ++r) d_.Observe(r, step_, progress(r, waited), t_);
      if (auto v = d_.Check(t_, gathering_)) {
        if (seen_after) *seen_after = waited;
        return v;
      }
    }
    return std::nullopt;
  }

  static constexpr int kWorld = 4;
  std::vector<LogicalRank> gathering_;  // the ranks waiting in a coordinator's gather
  Clock::time_point t_ = Clock::now();
  uint64_t step_ = 0;
  HangDetector d_;
};

TEST_F(HangDetectorTest, ARankOutsideAnyCallWhileTheOthersWaitIsHungPastTheBound) {
  Train(10);  // a median of 100 ms: the bound is max(2000, 10 x 100) ms
  ASSERT_TRUE(d_.MedianStepMs().has_value());
  EXPECT_EQ(d_.Bound(), milliseconds(2000));
  const uint64_t calls = step_ * 4;
  int64_t after = 0;
  auto v = Wait(
      5000,
      [&](LogicalRank r, int64_t) {
        return r == 2 ? Sample(calls, false) : Sample(calls + 1, true, r == 3 ? 2 : r + 1);
      },
      &after);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{2});
  EXPECT_NE(v->why.find("outside any collective"), std::string::npos) << v->why;
  // The waiters' last progress was the first beat: blamed one beat past 2 s after it.
  EXPECT_GT(after, 2000);
  EXPECT_LE(after, 2200);
  // One verdict per epoch.
  EXPECT_FALSE(d_.Check(t_ + milliseconds(10000)).has_value());
  d_.Reset(kWorld, t_);
  EXPECT_FALSE(d_.Check(t_).has_value());
}

TEST_F(HangDetectorTest, SlowStepsWidenTheBound) {
  Train(10, 400);  // 10 x 400 ms
  EXPECT_EQ(d_.Bound(), milliseconds(4000));
  const uint64_t calls = step_ * 4;
  int64_t after = 0;
  auto v = Wait(
      8000,
      [&](LogicalRank r, int64_t) { return r == 0 ? Sample(calls, false) : Sample(calls, true); },
      &after);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{0});
  EXPECT_GT(after, 4000);
}

TEST_F(HangDetectorTest, AnApplicationThatStoppedSamplingIsTheCulprit) {
  Train(10);
  const uint64_t calls = step_ * 4;
  auto v = Wait(5000, [&](LogicalRank r, int64_t waited) {
    // Rank 1 stopped (SIGSTOP): its last sample ages; the others wait on it.
    return r == 1 ? Sample(calls, true, 2, waited) : Sample(calls + 1, true, 1);
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1});
  EXPECT_NE(v->why.find("stopped?"), std::string::npos) << v->why;
}

// A heartbeat carries the sample's age as of its sending, and a stopped application's newest one
// may be within the bound by less than a heartbeat's period when its stall passes it: its age is
// counted to now, so it is named silent ("stopped?"), not a live rank inside a call waiting on no
// peer (what protect_hang_job_test once saw on CI's two cores).
TEST_F(HangDetectorTest, AStoppedApplicationsAgeCountsToNowNotToItsLastHeartbeat) {
  Train(10);  // the bound: 2000 ms
  const uint64_t calls = step_ * 4 + 1;
  std::optional<HangDetector::Verdict> v;
  for (int64_t waited = 100; waited <= 5000 && !v; waited += 100) {
    t_ += milliseconds(100);
    for (LogicalRank r = 0; r < kWorld; ++r) {
      if (r != 1) {
        d_.Observe(r, step_, Sample(calls, true, 1), t_);  // inside the call, waiting on rank 1
      } else if (waited % 400 == 0) {
        // Rank 1's heartbeats every 400 ms: it sampled once inside the call (at 400) and stopped.
        d_.Observe(r, step_, Sample(calls, true, -1, waited - 400), t_);
      }
    }
    v = d_.Check(t_);
  }
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1});
  EXPECT_NE(v->why.find("stopped?"), std::string::npos) << v->why;
}

TEST_F(HangDetectorTest, InsideAHungCollectiveTheRankWaitingOnNoPeerIsTheCulprit) {
  Train(10);
  const uint64_t calls = step_ * 4 + 1;
  // A ring: each waits on its left neighbour, except rank 3, stuck between two messages.
  auto v = Wait(5000, [&](LogicalRank r, int64_t) {
    return Sample(calls, true, r == 3 ? -1 : (r + kWorld - 1) % kWorld);
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{3});
  EXPECT_NE(v->why.find("waiting on no peer"), std::string::npos) << v->why;
}

// Ranks that all wait inside a call on no peer (making the first epoch's communicators, say) wait
// for a rank that is not stalled as long as they are (it started later): they are not blamed
// when their own stall passes the bound, the late rank is once its stall does
// (protect_hang_job_test ARankThatHangsAsTheJobStartsIsRestarted once blamed ranks 0 and 2 on
// CI's two cores, rank 1 having come up 130 ms after them).
TEST_F(HangDetectorTest, RanksThatAllWaitOnNoPeerWaitForTheOneNotStalledYet) {
  Train(10);  // the bound: 2000 ms
  const uint64_t calls = step_ * 4;
  int64_t after = 0;
  auto v = Wait(
      6000,
      [&](LogicalRank r, int64_t waited) {
        // Rank 3 makes progress outside any call for 1 s more, then stops.
        if (r == 3) return Sample(calls + std::min<int64_t>(waited, 1000) / 100, false);
        return Sample(calls + 1, true);
      },
      &after);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{3});
  EXPECT_NE(v->why.find("outside any collective"), std::string::npos) << v->why;
  EXPECT_GT(after, 3000);  // rank 3's own stall past the bound, not the others'
  EXPECT_LE(after, 3200);
}

TEST_F(HangDetectorTest, OtherwiseThePeerMostOfThemWaitOn) {
  Train(10);
  const uint64_t calls = step_ * 4 + 1;
  auto v = Wait(5000, [&](LogicalRank r, int64_t) { return Sample(calls, true, r == 1 ? 0 : 1); });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1});
  // A tie names no one.
  d_.Reset(kWorld, t_);
  Train(10);
  const uint64_t later = step_ * 4 + 1;
  EXPECT_FALSE(
      Wait(5000, [&](LogicalRank r, int64_t) { return Sample(later, true, r < 2 ? 2 : 0); }));
}

// A chain of waits (0 and 3 on 2, 2 on 1) whose end, rank 1, is heard stalled a second after
// the others (its heartbeat's stamp, or its last call's end, came later): the rank most waited
// on (2) is no culprit, and nobody is named until rank 1 is stalled itself.
TEST_F(HangDetectorTest, TheEndOfAChainOfWaitsIsTheCulpritOnceItIsStalled) {
  Train(10);
  const uint64_t calls = step_ * 4 + 1;
  int64_t after = 0;
  auto v = Wait(
      6000,
      [&](LogicalRank r, int64_t waited) {
        if (r == 1) return Sample(waited < 1000 ? calls + waited : calls + 1000, true, -1);
        return Sample(calls, true, r == 2 ? 1 : 2);
      },
      &after);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1}) << v->why;
  EXPECT_NE(v->why.find("waiting on no peer"), std::string::npos) << v->why;
  EXPECT_GT(after, 1000 + 2000);
  // The same chain with rank 1 never stalled (its calls advance): nobody.
  d_.Reset(kWorld, t_);
  Train(10);
  const uint64_t later = step_ * 4 + 1;
  EXPECT_FALSE(Wait(6000, [&](LogicalRank r, int64_t waited) {
    return r == 1 ? Sample(later + static_cast<uint64_t>(waited), true, -1)
                  : Sample(later, true, r == 2 ? 1 : 2);
  }));
}

// A recovery's agreement: ranks 0, 2 and 3 wait in the coordinator's gather, outside any
// collective; rank 1 never came (hung inside the call it was in when the epoch ended). Those in
// the gather are waiters, never culprits: rank 1 is named, whether it sits inside a call or in
// its compute.
TEST_F(HangDetectorTest, RanksWaitingInAGatherWaitOnTheOthers) {
  Train(10);
  const uint64_t calls = step_ * 4 + 1;
  gathering_ = {0, 2, 3};
  auto v = Wait(5000, [&](LogicalRank r, int64_t) { return Sample(calls, r == 1); });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1}) << v->why;
  d_.Reset(kWorld, t_);
  Train(10);
  const uint64_t later = step_ * 4;
  v = Wait(5000, [&](LogicalRank, int64_t) { return Sample(later, false); });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->ranks, std::vector<LogicalRank>{1}) << v->why;
  EXPECT_NE(v->why.find("outside any collective"), std::string::npos) << v->why;
  // Every rank in the gather: the coordinator's own deadline decides, not the detector.
  gathering_ = {0, 1, 2, 3};
  d_.Reset(kWorld, t_);
  Train(10);
  EXPECT_FALSE(Wait(5000, [&](LogicalRank, int64_t) { return Sample(later + 40, false); }));
  // Ranks outside the world in the list are ignored.
  gathering_ = {-1, kWorld, 1 << 20};
  d_.Reset(kWorld, t_);
  Train(10);
  EXPECT_FALSE(Wait(5000, [&](LogicalRank, int64_t) { return Sample(later + 80, false); }));
}

TEST_F(HangDetectorTest, WithoutAMedianOrInALongPhaseTheFirstStepsBoundHolds) {
  // No step ended yet in this epoch: a minute.
  EXPECT_EQ(d_.Bound(), milliseconds(60000));
  auto stuck = [&](LogicalRank r, int64_t) { return Sample(5, r != 0); };
  int64_t after = 0;
  auto v = Wait(70000, stuck, &after);
  ASSERT_TRUE(v.has_value());
  EXPECT_GT(after, 60000);
  // A rank in a long phase (an L3 write's wait) lends everyone the first step's bound.
  d_.Reset(kWorld, t_);
  Train(10);
  const uint64_t calls = step_ * 4;
  EXPECT_FALSE(Wait(30000, [&](LogicalRank r, int64_t) {
    return r == 0 ? Sample(calls, false, -1, 10, true) : Sample(calls + 1, true, 0);
  }));
}

TEST_F(HangDetectorTest, NoVerdictWithoutWaitersOrWhenEveryRankLooksTheSame) {
  Train(10);
  const uint64_t calls = step_ * 4;
  // Every rank in its compute (a long evaluation, say): nobody waits, nobody is blamed.
  EXPECT_FALSE(Wait(10000, [&](LogicalRank, int64_t) { return Sample(calls, false); }));
  // Every rank stopped: the agents' watchdog's case.
  d_.Reset(kWorld, t_);
  Train(10);
  EXPECT_FALSE(
      Wait(10000, [&](LogicalRank, int64_t w) { return Sample(calls + 40, true, -1, w); }));
  // Steady progress inside calls (long collectives that advance) is no hang.
  d_.Reset(kWorld, t_);
  Train(10);
  EXPECT_FALSE(Wait(10000, [&](LogicalRank, int64_t w) {
    return Sample(calls + 100 + static_cast<uint64_t>(w), true, 0);
  }));
}

TEST_F(HangDetectorTest, ApplicationsWithoutSamplesAreNeverWaiters) {
  // An application that does not use rt-ft's runtime sends no sample.
  CallProgress none;
  for (int i = 0; i < 100; ++i) {
    t_ += milliseconds(100);
    for (LogicalRank r = 0; r < kWorld; ++r) d_.Observe(r, 0, none, t_);
    ASSERT_FALSE(d_.Check(t_).has_value());
  }
}

TEST_F(HangDetectorTest, KZeroTurnsItOff) {
  HangOptions off;
  off.k = 0;
  HangDetector d(off);
  EXPECT_FALSE(d.enabled());
  d.Reset(2, t_);
  for (int i = 0; i < 1000; ++i) {
    t_ += milliseconds(100);
    d.Observe(0, 1, Sample(1, false), t_);
    d.Observe(1, 1, Sample(1, true, 0), t_);
    ASSERT_FALSE(d.Check(t_).has_value());
  }
}

TEST_F(HangDetectorTest, RanksOutsideTheWorldAreIgnored) {
  d_.Observe(-1, 1, Sample(1, true), t_);
  d_.Observe(kWorld, 1, Sample(1, true), t_);
  d_.Observe(1 << 20, 1, Sample(1, true), t_);
  EXPECT_FALSE(d_.Check(t_ + milliseconds(100000)).has_value());
}

}  // namespace
}  // namespace rtft::control
