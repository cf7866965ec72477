// The goodput simulation against the closed forms it must reproduce: no failures, lost time per
// failure of each policy when failures are rare, Young/Daly's optimum found by the interval
// search, spares running out, both holders of a replica lost; the same seed, the same result;
// bad parameters refused.
#include "sim/goodput_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sim/goodput_search.h"

namespace rtft::bench::goodput {
namespace {

SimParams Base() {
  SimParams p;
  p.nodes = 128;
  p.work_s = 30 * 86400.0;
  p.failures_per_node_h = 1e-4;  // a job MTBF of 78 h
  p.transient_fraction = 0.25;
  p.step_s = 5;
  p.ckpt_blocking_s = 1;
  p.ckpt_write_s = 10;
  p.ckpt_load_s = 20;
  p.protect_overhead = 0.03;
  p.rtft_detect_crash_s = 0.01;
  p.rtft_detect_node_s = 1;
  p.rtft_recover_crash_s = 2;
  p.rtft_recover_node_s = 3;
  p.rtft_l3_interval_s = 3600;
  p.spares = 4;
  p.repair_h = 24;
  p.replica_rebuild_s = 10;
  p.restart_detect_crash_s = 10;
  p.restart_detect_node_s = 600;
  p.relaunch_s = 300;
  p.startup_s = 120;
  p.restart_interval_s = 1800;
  return p;
}

JobResult RunJob(const SimParams& p, Policy policy, uint64_t seed) {
  StatusOr<JobResult> r = SimulateJob(p, policy, seed);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r.value() : JobResult{};
}

// Lost time per failure over `seeds` jobs.
double LostPerFailure(const SimParams& p, Policy policy, int seeds) {
  double lost = 0, failures = 0;
  for (int s = 1; s <= seeds; ++s) {
    const JobResult r = RunJob(p, policy, s);
    EXPECT_TRUE(r.finished);
    lost += r.lost_s;
    failures += r.failures;
  }
  EXPECT_GT(failures, 1000);
  return lost / failures;
}

TEST(GoodputSim, WithoutFailuresEttrIsOneOverOnePlusOverhead) {
  SimParams p = Base();
  p.failures_per_node_h = 0;
  p.ckpt_blocking_s = 0;
  const JobResult rtft = RunJob(p, Policy::kRtft, 1);
  EXPECT_TRUE(rtft.finished);
  EXPECT_NEAR(rtft.ettr(), 1.0 / 1.03, 1e-12);
  EXPECT_EQ(rtft.failures, 0);
  EXPECT_NEAR(rtft.lost_s, 0.0, 1e-6);
  EXPECT_NEAR(RunJob(p, Policy::kRestart, 1).ettr(), 1.0, 1e-12);
  // With blocking checkpoints: one every interval, none at the very end.
  p.ckpt_blocking_s = 2;
  const double w = p.work_s;
  const double restart_ckpts = std::ceil(w / p.restart_interval_s) - 1;
  const double rtft_ckpts = std::ceil(w / p.rtft_l3_interval_s) - 1;
  EXPECT_NEAR(RunJob(p, Policy::kRestart, 1).ettr(), w / (w + 2 * restart_ckpts), 1e-12);
  EXPECT_NEAR(RunJob(p, Policy::kRtft, 1).ettr(), w / (w * 1.03 + 2 * rtft_ckpts), 1e-12);
  EXPECT_EQ(RunJob(p, Policy::kRestart, 1).checkpoints, restart_ckpts);
}

TEST(GoodputSim, RestartLosesHalfAnIntervalPlusTheRestartPerFailure) {
  SimParams p = Base();
  p.work_s = 3 * 365 * 86400.0;  // about 340 failures per job
  p.ckpt_blocking_s = 1e-3;
  p.ckpt_write_s = 0;
  const double restart = p.transient_fraction * p.restart_detect_crash_s +
                         (1 - p.transient_fraction) * p.restart_detect_node_s + p.relaunch_s +
                         p.startup_s + p.ckpt_load_s;
  const double expected = p.restart_interval_s / 2 + restart;
  EXPECT_NEAR(LostPerFailure(p, Policy::kRestart, 20), expected, 0.03 * expected);
  // A checkpoint that commits only after its write loses that much more.
  p.ckpt_write_s = 300;
  EXPECT_NEAR(LostPerFailure(p, Policy::kRestart, 20), expected + 300, 0.03 * expected);
}

TEST(GoodputSim, RtftLosesDetectionRecoveryAndHalfAStepPerFailure) {
  SimParams p = Base();
  p.work_s = 3 * 365 * 86400.0;
  p.spares = 1000;  // never exhausted
  const double f = p.transient_fraction;
  const double expected = f * (p.rtft_detect_crash_s + p.rtft_recover_crash_s) +
                          (1 - f) * (p.rtft_detect_node_s + p.rtft_recover_node_s) +
                          (1 + p.protect_overhead) * p.step_s / 2;
  EXPECT_NEAR(LostPerFailure(p, Policy::kRtft, 20), expected, 0.03 * expected);
}

TEST(GoodputSim, SearchFindsYoungDalyOptimum) {
  SimParams p = Base();
  p.nodes = 100;
  p.failures_per_node_h = 1e-3;  // MTBF 10 h
  p.ckpt_blocking_s = 30;
  p.ckpt_write_s = p.ckpt_load_s = 0;
  p.restart_detect_crash_s = p.restart_detect_node_s = p.relaunch_s = p.startup_s = 0;
  p.step_s = 1;
  p.work_s = 8 * 365 * 86400.0;  // about 7,000 failures per job
  const double young = YoungInterval(p);
  EXPECT_NEAR(young, std::sqrt(2 * 30 * 36000.0), 1e-9);
  EXPECT_NEAR(DalyInterval(p), young - 30, 1e-9);
  // Started from the formula, and from far off on either side: the simulation's optimum is
  // Young's interval, wherever the grid is centred.
  for (double center : {0.0, 3 * young, young / 3.3}) {  // no grid point falls on Young's
    StatusOr<IntervalSearch> s = SearchRestartInterval(p, {1, 2}, center);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_NEAR(s->interval_s, young, 0.15 * young) << "Young " << young << ", from " << center;
    EXPECT_GT(s->candidates, 20);
  }
}

TEST(GoodputSim, SameSeedSameResult) {
  const SimParams p = Base();
  for (Policy policy : {Policy::kRtft, Policy::kRestart}) {
    const JobResult a = RunJob(p, policy, 42), b = RunJob(p, policy, 42), c = RunJob(p, policy, 43);
    EXPECT_EQ(a.wall_s, b.wall_s);
    EXPECT_EQ(a.lost_s, b.lost_s);
    EXPECT_EQ(a.failures, b.failures);
    EXPECT_EQ(a.spare_swaps, b.spare_swaps);
    EXPECT_NE(a.wall_s, c.wall_s);
  }
  StatusOr<PointResult> x = RunPoint(p, 7, 3, 2), y = RunPoint(p, 7, 3, 2);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->search.interval_s, y->search.interval_s);
  EXPECT_EQ(x->lost_ratio.mean, y->lost_ratio.mean);
  EXPECT_EQ(x->rtft_ettr.mean, y->rtft_ettr.mean);
}

TEST(GoodputSim, BothPoliciesMeetTheSameFailures) {
  SimParams p = Base();
  p.spares = 1000;
  p.protect_overhead = 0;
  // The same failure times for the same seed: the shorter job meets a prefix of them.
  const JobResult rtft = RunJob(p, Policy::kRtft, 5), restart = RunJob(p, Policy::kRestart, 5);
  EXPECT_LT(rtft.wall_s, restart.wall_s);
  EXPECT_LE(rtft.failures, restart.failures);
  EXPECT_GT(rtft.failures, 0);
  // Protection costs time on every step: with rare failures the plain job ends first.
  p.protect_overhead = 0.03;
  p.failures_per_node_h = 1e-6;
  EXPECT_GT(RunJob(p, Policy::kRtft, 5).wall_s, RunJob(p, Policy::kRestart, 5).wall_s);
}

TEST(GoodputSim, SparesRunOutThenCheckpointAndExit) {
  SimParams p = Base();
  p.spares = 0;
  const JobResult r = RunJob(p, Policy::kRtft, 3);
  EXPECT_GT(r.node_losses, 0);
  EXPECT_EQ(r.spares_exhausted, r.node_losses);
  EXPECT_EQ(r.spare_swaps, 0);
  // Each exit costs a relaunch but no replay: less than checkpoint-restart per node loss.
  const double per_exit = p.rtft_detect_node_s + p.ckpt_write_s + p.relaunch_s + p.startup_s +
                          p.ckpt_load_s + (1 + p.protect_overhead) * p.step_s;
  EXPECT_LT(r.lost_s, r.node_losses * per_exit + r.crashes * 10.0);
  // Enough spares and a quick repair: none run out.
  p.spares = 8;
  p.repair_h = 1;
  EXPECT_EQ(RunJob(p, Policy::kRtft, 3).spares_exhausted, 0);
}

TEST(GoodputSim, NeighbourLostDuringRebuildFallsBackToL3) {
  SimParams p = Base();
  p.nodes = 4;  // every other node is a ring neighbour
  p.failures_per_node_h = 0.05;
  p.transient_fraction = 0;
  p.spares = 1000;
  p.replica_rebuild_s = 3600;
  const JobResult r = RunJob(p, Policy::kRtft, 9);
  EXPECT_GT(r.both_holders_lost, 0);
  p.replica_rebuild_s = 0;
  const JobResult none = RunJob(p, Policy::kRtft, 9);
  EXPECT_EQ(none.both_holders_lost, 0);
  EXPECT_GT(r.lost_s, none.lost_s);
}

TEST(GoodputSim, RtftLosesLessThanRestart) {
  SimParams p = Base();
  p.failures_per_node_h = 2.6e-3;  // a job MTBF of 3 h, as Llama 3's at 16K GPUs
  StatusOr<PointResult> r = RunPoint(p, 1, 4, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->all_finished);
  EXPECT_GT(r->rtft_ettr.mean, r->restart_ettr.mean);
  EXPECT_LT(r->rtft_lost_s.mean, r->restart_lost_s.mean);
  EXPECT_GT(r->lost_ratio.mean, 0);
  EXPECT_LT(r->lost_ratio.mean, 0.1);
  EXPECT_LE(r->lost_ratio.min, r->lost_ratio.mean);
  EXPECT_GE(r->lost_ratio.max, r->lost_ratio.mean);
}

TEST(GoodputSim, BadParametersRefused) {
  const std::vector<void (*)(SimParams*)> breakers = {
      [](SimParams* p) { p->nodes = 1; },
      [](SimParams* p) { p->work_s = 0; },
      [](SimParams* p) { p->work_s = std::numeric_limits<double>::infinity(); },
      [](SimParams* p) { p->failures_per_node_h = -1e-4; },
      [](SimParams* p) { p->transient_fraction = 1.5; },
      [](SimParams* p) { p->step_s = std::numeric_limits<double>::quiet_NaN(); },
      [](SimParams* p) { p->protect_overhead = -0.1; },
      [](SimParams* p) { p->restart_interval_s = 0; },
      [](SimParams* p) { p->rtft_l3_interval_s = -1; },
      [](SimParams* p) { p->spares = -1; },
      [](SimParams* p) { p->relaunch_s = -5; },
      [](SimParams* p) {  // 3e8 failures in the give-up time: too many to simulate
        p->nodes = 4096;
        p->failures_per_node_h = 10;
      },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    SimParams p = Base();
    breakers[i](&p);
    const StatusOr<JobResult> r = SimulateJob(p, Policy::kRtft, 1);
    EXPECT_FALSE(r.ok()) << "breaker " << i;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  }
  EXPECT_FALSE(RunPoint(Base(), 1, 0, 1).ok());
  EXPECT_FALSE(SearchRestartInterval(Base(), {}).ok());
}

}  // namespace
}  // namespace rtft::bench::goodput
