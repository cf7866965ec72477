// What `rtft-bench goodput` reports for one configuration: checkpoint-restart's best interval,
// found by simulation (the same seeded failures for every candidate), then both policies over
// several seeded jobs, with the mean and spread of each figure. Pure, like goodput_sim.h.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/goodput_sim.h"

namespace rtft::bench::goodput {

// Young's first-order optimum sqrt(2 C M), and Daly's sqrt(2 C (M + R)) - C with R the mean
// restart (detection included): C the blocking time, M the job's MTBF. Seconds of work.
double YoungInterval(const SimParams& p);
double DalyInterval(const SimParams& p);

struct IntervalSearch {
  double interval_s = 0;     // the candidate with the least mean wall time
  double mean_wall_s = 0;    // its mean wall time over the search's jobs
  double lower_bound_s = 0;  // no shorter interval: one step, and the write of the last one
  int candidates = 0;
};

// A log grid around `center_s` (1/16x to 16x; 0: Daly's interval), then a finer one around its
// best point. Every candidate runs the same seeds, so their differences are the interval's, not
// luck's.
StatusOr<IntervalSearch> SearchRestartInterval(const SimParams& p,
                                               const std::vector<uint64_t>& seeds,
                                               double center_s = 0);

struct Spread {
  int count = 0;                              // values summarized; none: all zero
  double mean = 0, sd = 0, min = 0, max = 0;  // sd: sample standard deviation
};
Spread SpreadOf(const std::vector<double>& values);

struct PointResult {
  IntervalSearch search;
  std::vector<JobResult> rtft, restart;  // one per seed, the same seeds for both
  Spread rtft_ettr, restart_ettr;
  // Per job: rt-ft's failure-induced lost time over checkpoint-restart's (jobs that met a
  // failure only: count says how many).
  Spread lost_ratio;
  Spread rtft_lost_s, restart_lost_s;
  bool all_finished = false;
};

// `jobs` seeded jobs (seed, seed + 1, ...) for each policy, checkpoint-restart at the interval
// found with `search_jobs` other seeds. p.restart_interval_s is ignored.
StatusOr<PointResult> RunPoint(const SimParams& p, uint64_t seed, int jobs, int search_jobs);

}  // namespace rtft::bench::goodput
