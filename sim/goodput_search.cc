#include "sim/goodput_search.h"

#include <algorithm>
#include <cmath>

namespace rtft::bench::goodput {
namespace {

// The search's seeds never coincide with the reported jobs' (seed, seed + 1, ...), so the
// interval is not fitted to the very failures it is then judged on.
constexpr uint64_t kSearchSeedOffset = 0x5ea4c4000000ull;

double MeanRestartS(const SimParams& p) {
  const double detect = p.transient_fraction * p.restart_detect_crash_s +
                        (1 - p.transient_fraction) * p.restart_detect_node_s;
  return detect + p.relaunch_s + p.startup_s + p.ckpt_load_s;
}

StatusOr<double> MeanWall(SimParams p, double interval, const std::vector<uint64_t>& seeds) {
  p.restart_interval_s = interval;
  double sum = 0;
  for (uint64_t seed : seeds) {
    RTFT_ASSIGN_OR_RETURN(JobResult r, SimulateJob(p, Policy::kRestart, seed));
    // An unfinished job's wall time is the give-up time: the worst a candidate can score.
    sum += r.wall_s;
  }
  return sum / seeds.size();
}

// Evaluates `grid` (ascending), keeping the best; returns the index of the best point.
StatusOr<size_t> BestOf(const SimParams& p, const std::vector<double>& grid,
                        const std::vector<uint64_t>& seeds, IntervalSearch* best) {
  size_t best_i = 0;
  for (size_t i = 0; i < grid.size(); ++i) {
    RTFT_ASSIGN_OR_RETURN(double wall, MeanWall(p, grid[i], seeds));
    ++best->candidates;
    if (best->candidates == 1 || wall < best->mean_wall_s) {
      best->mean_wall_s = wall;
      best->interval_s = grid[i];
      best_i = i;
    }
  }
  return best_i;
}

// `points` log-spaced values from lo to hi, clamped to [floor, ceiling], without repeats.
std::vector<double> LogGrid(double lo, double hi, int points, double floor, double ceiling) {
  std::vector<double> grid;
  for (int i = 0; i < points; ++i) {
    const double x = lo * std::pow(hi / lo, points > 1 ? double(i) / (points - 1) : 0.0);
    const double v = std::clamp(x, floor, ceiling);
    if (grid.empty() || v > grid.back() * (1 + 1e-12)) grid.push_back(v);
  }
  return grid;
}

Spread SpreadOfJobs(const std::vector<JobResult>& jobs, double (*field)(const JobResult&)) {
  std::vector<double> v;
  for (const JobResult& j : jobs) v.push_back(field(j));
  return SpreadOf(v);
}

}  // namespace

double YoungInterval(const SimParams& p) {
  return std::sqrt(2.0 * p.ckpt_blocking_s * JobMtbfSeconds(p));
}

double DalyInterval(const SimParams& p) {
  const double c = p.ckpt_blocking_s;
  return std::max(0.0, std::sqrt(2.0 * c * (JobMtbfSeconds(p) + MeanRestartS(p))) - c);
}

StatusOr<IntervalSearch> SearchRestartInterval(const SimParams& p,
                                               const std::vector<uint64_t>& seeds,
                                               double center_s) {
  if (seeds.empty()) return Status::InvalidArgument("the interval search needs a seed");
  IntervalSearch s;
  s.lower_bound_s = std::max(p.step_s, p.ckpt_write_s);
  const double ceiling = std::max(s.lower_bound_s, p.work_s);
  double center = center_s > 0 ? center_s : DalyInterval(p);
  if (!(center > s.lower_bound_s) || !std::isfinite(center)) center = 4 * s.lower_bound_s;
  center = std::min(center, ceiling);
  std::vector<uint64_t> search_seeds;
  for (uint64_t seed : seeds) search_seeds.push_back(seed + kSearchSeedOffset);
  const std::vector<double> coarse =
      LogGrid(center / 16, center * 16, 25, s.lower_bound_s, ceiling);
  RTFT_ASSIGN_OR_RETURN(size_t i, BestOf(p, coarse, search_seeds, &s));
  const double lo = coarse[i > 0 ? i - 1 : i], hi = coarse[std::min(i + 1, coarse.size() - 1)];
  if (hi > lo) {
    RTFT_RETURN_IF_ERROR(BestOf(p, LogGrid(lo, hi, 9, lo, hi), search_seeds, &s).status());
  }
  return s;
}

Spread SpreadOf(const std::vector<double>& values) {
  Spread s;
  s.count = static_cast<int>(values.size());
  if (values.empty()) return s;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  for (double v : values) s.mean += v / values.size();
  double var = 0;
  for (double v : values) var += (v - s.mean) * (v - s.mean);
  s.sd = values.size() > 1 ? std::sqrt(var / (values.size() - 1)) : 0.0;
  return s;
}

StatusOr<PointResult> RunPoint(const SimParams& p, uint64_t seed, int jobs, int search_jobs) {
  if (jobs < 1 || search_jobs < 1) return Status::InvalidArgument("jobs and search jobs >= 1");
  PointResult r;
  std::vector<uint64_t> search_seeds;
  for (int i = 0; i < search_jobs; ++i) search_seeds.push_back(seed + i);
  RTFT_ASSIGN_OR_RETURN(r.search, SearchRestartInterval(p, search_seeds));
  SimParams q = p;
  q.restart_interval_s = r.search.interval_s;
  std::vector<double> ratios;
  r.all_finished = true;
  for (int i = 0; i < jobs; ++i) {
    RTFT_ASSIGN_OR_RETURN(JobResult a, SimulateJob(q, Policy::kRtft, seed + i));
    RTFT_ASSIGN_OR_RETURN(JobResult b, SimulateJob(q, Policy::kRestart, seed + i));
    r.all_finished = r.all_finished && a.finished && b.finished;
    // A job that met no failure has no lost time to compare.
    if (b.lost_s > 0) ratios.push_back(a.lost_s / b.lost_s);
    r.rtft.push_back(a);
    r.restart.push_back(b);
  }
  r.rtft_ettr = SpreadOfJobs(r.rtft, [](const JobResult& j) { return j.ettr(); });
  r.restart_ettr = SpreadOfJobs(r.restart, [](const JobResult& j) { return j.ettr(); });
  r.rtft_lost_s = SpreadOfJobs(r.rtft, [](const JobResult& j) { return j.lost_s; });
  r.restart_lost_s = SpreadOfJobs(r.restart, [](const JobResult& j) { return j.lost_s; });
  r.lost_ratio = SpreadOf(ratios);
  return r;
}

}  // namespace rtft::bench::goodput
