#include "bench/goodput/goodput_sweep.h"

#include <algorithm>
#include <cmath>

namespace rtft::bench::goodput {
namespace {

constexpr double kFactors[] = {0.5, 2.0};

StatusOr<PointResult> RunInputs(const GoodputInputs& in, const SweepOptions& o, SimParams* params) {
  nlohmann::json derived;
  RTFT_ASSIGN_OR_RETURN(SimParams p, ToSimParams(in, o.gpus, o.gpus_per_node, &derived));
  if (params != nullptr) *params = p;
  return RunPoint(p, o.seed, o.jobs, o.search_jobs);
}

// The input scaled by `factor` within its range (integers rounded), or nothing new.
bool Scaled(const Input& input, double factor, double* value) {
  double v = std::clamp(input.value * factor, input.min, input.max);
  if (input.integer) v = std::round(v);
  *value = v;
  return v != input.value;
}

Sensitivity Summarize(const Input& input, double base_ratio,
                      const std::vector<SweepPoint>& points) {
  Sensitivity s;
  s.input = input.name;
  const SweepPoint *low = nullptr, *high = nullptr;
  for (const SweepPoint& p : points) {
    if (p.input != input.name) continue;
    (p.factor < 1 ? low : high) = &p;
    s.max_abs_delta = std::max(s.max_abs_delta, std::fabs(p.result.lost_ratio.mean - base_ratio));
  }
  if (low == nullptr && high == nullptr) return s;
  const double base_value = input.value;
  if (low != nullptr) {
    s.low_value = low->value;
    s.low_ratio = low->result.lost_ratio.mean;
  }
  if (high != nullptr) {
    s.high_value = high->value;
    s.high_ratio = high->result.lost_ratio.mean;
  }
  // Between the two points, or between the base and the one point there is.
  const double v0 = low ? s.low_value : base_value, r0 = low ? s.low_ratio : base_ratio;
  const double v1 = high ? s.high_value : base_value, r1 = high ? s.high_ratio : base_ratio;
  if (v0 > 0 && v1 > 0 && v0 != v1 && r0 > 0 && r1 > 0)
    s.elasticity = std::log(r1 / r0) / std::log(v1 / v0);
  return s;
}

}  // namespace

StatusOr<SweepResult> Sweep(const GoodputInputs& inputs, const SweepOptions& options,
                            const std::function<void(const SweepPoint&)>& each) {
  GoodputInputs base = inputs;
  SweepResult r;
  RTFT_ASSIGN_OR_RETURN(r.base, RunInputs(base, options, &r.base_params));
  if (base.Get("spares") < 0) {
    RTFT_RETURN_IF_ERROR(base.Set("spares", r.base_params.spares,
                                  "auto at " + std::to_string(options.gpus) + " GPUs"));
  }
  for (const Input& input : base.all()) {
    for (double factor : kFactors) {
      double value = 0;
      if (!Scaled(input, factor, &value)) continue;
      GoodputInputs varied = base;
      RTFT_RETURN_IF_ERROR(varied.Set(input.name, value, "sweep"));
      SweepPoint point{input.name, factor, value, {}};
      RTFT_ASSIGN_OR_RETURN(point.result, RunInputs(varied, options, nullptr));
      if (each) each(point);
      r.points.push_back(std::move(point));
    }
  }
  for (const Input& input : base.all()) {
    const Sensitivity s = Summarize(input, r.base.lost_ratio.mean, r.points);
    if (s.low_value > 0 || s.high_value > 0) r.ranking.push_back(s);
  }
  std::stable_sort(r.ranking.begin(), r.ranking.end(),
                   [](const auto& a, const auto& b) { return a.max_abs_delta > b.max_abs_delta; });
  return r;
}

}  // namespace rtft::bench::goodput
