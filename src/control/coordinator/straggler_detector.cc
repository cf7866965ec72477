#include "control/coordinator/straggler_detector.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace rtft::control {

namespace {

// The median of n values given in ascending order by `at`.
template <typename At>
double MedianOfSorted(size_t n, At at) {
  return n % 2 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

}  // namespace

void StragglerDetector::Reset(int32_t world, int32_t tensor, int32_t pipeline) {
  changed_ = false;
  ranks_.assign(static_cast<size_t>(std::max(world, 0)), Rank());
  named_.assign(ranks_.size(), false);
  group_.assign(ranks_.size(), 0);
  const int64_t t = std::max(tensor, 1), p = std::max(pipeline, 1);
  if (world <= 0 || world % (t * p) != 0) return;  // no grid of that shape: one group
  const int64_t d = world / (t * p);
  for (int64_t r = 0; r < world; ++r) group_[r] = (r % t) + t * (r / (t * d));
}

void StragglerDetector::Observe(LogicalRank rank, const StepWork& work) {
  if (!enabled() || work.steps == 0 || rank < 0 || static_cast<size_t>(rank) >= ranks_.size())
    return;
  Rank& r = ranks_[rank];
  changed_ = true;
  r.samples.push_back(work);
  r.steps += work.steps;
  r.total += work.steps;
  // Keep the newest samples that still cover the window, and at least kMinSamples.
  const uint64_t window = static_cast<uint64_t>(o_.window);
  while (r.samples.size() > kMinSamples && r.steps - r.samples.front().steps >= window) {
    r.steps -= r.samples.front().steps;
    r.samples.pop_front();
  }
}

std::optional<double> StragglerDetector::Work(const Rank& r) const {
  if (r.steps < static_cast<uint64_t>(o_.window) || r.samples.size() < kMinSamples)
    return std::nullopt;
  std::vector<double> means;
  means.reserve(r.samples.size());
  for (const StepWork& w : r.samples)
    means.push_back(static_cast<double>(w.us) / 1000.0 / static_cast<double>(w.steps));
  std::sort(means.begin(), means.end());
  return MedianOfSorted(means.size(), [&](size_t i) { return means[i]; });
}

std::optional<StragglerDetector::Verdict> StragglerDetector::Check() {
  // The primary asks at every scan; only new work can change the answer.
  if (!enabled() || ranks_.size() < 2 || !changed_) return std::nullopt;
  changed_ = false;
  std::vector<double> mean(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto w = Work(ranks_[i]);
    if (!w) return std::nullopt;
    mean[i] = *w;
  }
  // Each group's ranks sorted by their work, once: a rank's peers' median is then the median of
  // its group's list without it (O(world log world) per check, not a sort per rank).
  std::map<int64_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < ranks_.size(); ++i) groups[group_[i]].push_back(i);
  std::vector<double> peers(ranks_.size(), 0);
  for (auto& [group, members] : groups) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end(),
              [&](size_t a, size_t b) { return mean[a] < mean[b]; });
    for (size_t k = 0; k < members.size(); ++k)
      peers[members[k]] = MedianOfSorted(
          members.size() - 1, [&](size_t p) { return mean[members[p < k ? p : p + 1]]; });
  }
  // Every rank past the threshold now keeps the step it was first seen so; one under it starts
  // over. Of those past it for a further window, the slowest against its peers not named yet.
  const double limit = 1.0 + o_.percent / 100.0;
  const uint64_t window = static_cast<uint64_t>(o_.window);
  size_t worst = ranks_.size();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    const bool over = peers[i] > 0 && mean[i] / peers[i] > limit;
    if (!over) {
      r.over_since.reset();
      continue;
    }
    if (!r.over_since) r.over_since = r.total;
    const uint64_t past = r.total - *r.over_since;
    if (named_[i] || past < window || static_cast<double>(past) * mean[i] < o_.min_past_ms)
      continue;
    if (worst == ranks_.size() || mean[i] / peers[i] > mean[worst] / peers[worst]) worst = i;
  }
  if (worst == ranks_.size()) return std::nullopt;
  const double median = peers[worst];
  named_[worst] = true;
  Verdict v;
  v.rank = static_cast<LogicalRank>(worst);
  v.work_ms = mean[worst];
  v.peers_ms = median;
  v.ranks = mean;
  char head[256];
  std::snprintf(head, sizeof(head),
                "own work %.3f ms per step over its last %d+ steps, %.0f %% over its peers' "
                "median %.3f ms (threshold %d %%, past it for %llu steps); every rank's:",
                v.work_ms, o_.window, (v.work_ms / median - 1.0) * 100.0, median, o_.percent,
                static_cast<unsigned long long>(ranks_[worst].total - *ranks_[worst].over_since));
  v.why = head;
  for (size_t i = 0; i < mean.size(); ++i) {
    char one[48];
    std::snprintf(one, sizeof(one), " %zu=%.3f", i, mean[i]);
    v.why += one;
  }
  return v;
}

}  // namespace rtft::control
