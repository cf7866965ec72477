// The sensitivity sweep of `rtft-bench goodput`: every input halved and doubled in turn (within
// its range), the rest as given, at one GPU count and with the same seeds as the base, so each
// change of lost_ratio is the input's. Inputs are ranked by the largest change they cause.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/goodput/goodput_inputs.h"
#include "sim/goodput_search.h"

namespace rtft::bench::goodput {

struct SweepOptions {
  int gpus = 16384;
  int gpus_per_node = 8;
  uint64_t seed = 1;
  int jobs = 10;
  int search_jobs = 4;
};

struct SweepPoint {
  std::string input;
  double factor = 1, value = 0;
  PointResult result;
};

struct Sensitivity {
  std::string input;
  double low_value = 0, high_value = 0;  // the input halved and doubled (clamped)
  double low_ratio = 0, high_ratio = 0;  // lost_ratio at each
  double max_abs_delta = 0;              // the larger change of lost_ratio from the base
  // d ln(lost_ratio) / d ln(input) between the two points.
  double elasticity = 0;
};

struct SweepResult {
  SimParams base_params;
  PointResult base;
  std::vector<SweepPoint> points;
  std::vector<Sensitivity> ranking;  // largest max_abs_delta first
};

// `each` sees every point as it is done (for progress and JSON lines). Spares set to auto are
// fixed at the count auto gives at options.gpus first, so that the repair time and the failure
// rate are judged with the same spares, and the spare count is swept like any other input.
StatusOr<SweepResult> Sweep(const GoodputInputs& inputs, const SweepOptions& options,
                            const std::function<void(const SweepPoint&)>& each);

}  // namespace rtft::bench::goodput
