#include "control/coordinator/straggler_detector.h"

#include <algorithm>
#include <cstdio>

namespace rtft::control {

void StragglerDetector::Reset(int32_t world, int32_t tensor, int32_t pipeline) {
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
  r.samples.push_back(work);
  r.steps += work.steps;
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
  const size_t n = means.size();
  return n % 2 ? means[n / 2] : (means[n / 2 - 1] + means[n / 2]) / 2;
}

std::optional<StragglerDetector::Verdict> StragglerDetector::Check() {
  if (!enabled() || ranks_.size() < 2) return std::nullopt;
  std::vector<double> mean(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto w = Work(ranks_[i]);
    if (!w) return std::nullopt;
    mean[i] = *w;
  }
  // The rank not named yet that is slowest against the median of its peers.
  size_t worst = ranks_.size();
  double median = 0, ratio = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (named_[i]) continue;
    std::vector<double> peers;
    for (size_t j = 0; j < ranks_.size(); ++j) {
      if (j != i && group_[j] == group_[i]) peers.push_back(mean[j]);
    }
    if (peers.empty()) continue;
    std::sort(peers.begin(), peers.end());
    const size_t n = peers.size();
    const double m = n % 2 ? peers[n / 2] : (peers[n / 2 - 1] + peers[n / 2]) / 2;
    if (m <= 0) continue;
    if (worst == ranks_.size() || mean[i] / m > ratio) {
      worst = i;
      median = m;
      ratio = mean[i] / m;
    }
  }
  if (worst == ranks_.size() || ratio <= 1.0 + o_.percent / 100.0) return std::nullopt;
  named_[worst] = true;
  Verdict v;
  v.rank = static_cast<LogicalRank>(worst);
  v.work_ms = mean[worst];
  v.peers_ms = median;
  v.ranks = mean;
  char head[256];
  std::snprintf(head, sizeof(head),
                "own work %.3f ms per step over its last %d+ steps, %.0f %% over its peers' "
                "median %.3f ms (threshold %d %%); every rank's:",
                v.work_ms, o_.window, (v.work_ms / median - 1.0) * 100.0, median, o_.percent);
  v.why = head;
  for (size_t i = 0; i < mean.size(); ++i) {
    char one[48];
    std::snprintf(one, sizeof(one), " %zu=%.3f", i, mean[i]);
    v.why += one;
  }
  return v;
}

}  // namespace rtft::control
