#include "offload/share_search.h"

#include <algorithm>

namespace rtft::offload {

// The climb is a compass search: from the incumbent it measures one neighbour `step_` subgroups
// away, then the other side, moves to whichever is faster by the margin (keeping the step and
// trying that direction first again), and halves the step when neither is. Step times are noisy,
// so the margin keeps a share from winning on noise alone, measured shares are not measured again
// while climbing (their mean stands), and the last confirm_steps re-measure the two best shares so
// that a single lucky step does not decide. Every comparison is of means over the same machine
// and model, so no model error enters.

ShareSearch::ShareSearch(uint64_t max_gpu, uint64_t start, const ShareSearchOptions& options)
    : max_gpu_(max_gpu), start_(std::min(start, max_gpu)), options_(options), best_(start_) {
  options_.max_steps = std::max(options_.max_steps, 1);
  options_.confirm_steps = std::clamp(options_.confirm_steps, 0, options_.max_steps);
  const uint64_t divisor = static_cast<uint64_t>(std::max(options_.min_step_divisor, 1));
  min_step_ = std::max<uint64_t>(1, max_gpu_ / divisor);
  step_ = std::max(min_step_, (max_gpu_ + 2) / 4);
  // Toward the larger side of the range first: it holds more of the candidates.
  dir_ = 2 * start_ <= max_gpu_ ? 1 : -1;
  if (max_gpu_ == 0) phase_ = Phase::kDone;
  Advance();
}

void ShareSearch::Seed(uint64_t g, double seconds) {
  if (done() || g > max_gpu_ || seconds <= 0) return;
  Samples& s = samples_[g];
  s.sum += seconds;
  ++s.count;
  Advance();
}

void ShareSearch::Report(uint64_t g, double seconds) {
  if (done()) return;
  ++steps_;
  if (g <= max_gpu_ && seconds > 0) {
    Samples& s = samples_[g];
    s.sum += seconds;
    ++s.count;
  }
  if (phase_ == Phase::kConfirm) --confirm_left_;
  Advance();
}

double ShareSearch::Mean(uint64_t g) const {
  auto it = samples_.find(g);
  return it == samples_.end() ? 0.0 : it->second.sum / it->second.count;
}

int ShareSearch::best_samples() const {
  auto it = samples_.find(best_);
  return it == samples_.end() ? 0 : it->second.count;
}

bool ShareSearch::Faster(uint64_t a, uint64_t b) const {
  return Mean(a) < Mean(b) * (1.0 - options_.margin);
}

uint64_t ShareSearch::BestMean() const {
  uint64_t best = best_;
  double best_mean = 0;
  for (const auto& [g, s] : samples_) {
    const double mean = s.sum / s.count;
    if (best_mean == 0 || mean < best_mean) best = g, best_mean = mean;
  }
  return best;
}

void ShareSearch::Advance() {
  if (phase_ == Phase::kClimb) AdvanceClimb();
  if (phase_ == Phase::kConfirm) AdvanceConfirm();
}

void ShareSearch::AdvanceClimb() {
  const int climb_steps = options_.max_steps - options_.confirm_steps;
  while (steps_ < climb_steps) {
    if (!Measured(best_)) {
      next_ = best_;
      return;
    }
    if (probe_ >= 2) {
      if (step_ <= min_step_) break;
      step_ = std::max(min_step_, step_ / 2);
      probe_ = 0;
      continue;
    }
    const int d = probe_ == 0 ? dir_ : -dir_;
    uint64_t c = best_;
    if (d > 0) c = std::min(max_gpu_, best_ + step_);
    if (d < 0) c = best_ > step_ ? best_ - step_ : 0;
    if (c == best_) {
      ++probe_;
      continue;
    }
    if (!Measured(c)) {
      next_ = c;
      return;
    }
    if (Faster(c, best_)) {
      best_ = c;
      dir_ = d;
      probe_ = 0;
    } else {
      ++probe_;
    }
  }
  phase_ = Phase::kConfirm;
  confirm_left_ = std::min(options_.confirm_steps, options_.max_steps - steps_);
}

void ShareSearch::AdvanceConfirm() {
  if (confirm_left_ <= 0 || samples_.empty()) {
    if (!samples_.empty()) best_ = BestMean();
    phase_ = Phase::kDone;
    return;
  }
  // Re-measure whichever of the two best means has fewer samples (the best one on a tie).
  const uint64_t first = BestMean();
  uint64_t second = first;
  double second_mean = 0;
  for (const auto& [g, s] : samples_) {
    const double mean = s.sum / s.count;
    if (g != first && (second_mean == 0 || mean < second_mean)) second = g, second_mean = mean;
  }
  const int first_count = samples_.at(first).count;
  const int second_count = samples_.at(second).count;
  best_ = first;
  next_ = second_count < first_count ? second : first;
}

}  // namespace rtft::offload
