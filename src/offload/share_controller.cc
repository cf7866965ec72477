#include "offload/share_controller.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/logging.h"

namespace rtft::offload {
namespace {

// Rates are blended over steps: each new sample weighs one half.
void Blend(double* rate, uint64_t amount, double seconds) {
  if (amount == 0 || seconds <= 0) return;
  const double sample = static_cast<double>(amount) / seconds;
  *rate = *rate > 0 ? 0.5 * *rate + 0.5 * sample : sample;
}

double Ms(double seconds) { return std::round(seconds * 1e5) / 1e2; }

}  // namespace

const char* SharePhaseName(SharePhase phase) {
  switch (phase) {
    case SharePhase::kFixed:
      return "fixed";
    case SharePhase::kCalibrating:
      return "calibrating";
    case SharePhase::kSearching:
      return "searching";
    case SharePhase::kSettled:
      return "settled";
  }
  return "unknown";
}

ShareController::ShareController(const OffloadShape& shape, const ShareControllerOptions& options)
    : shape_(shape), options_(options) {
  options_.cpu_threads = std::max(1, options_.cpu_threads);
  options_.drift_steps = std::max(1, options_.drift_steps);
  slots_ = SlotsWithinBudget(shape_);
  max_gpu_ = slots_ > 0 ? shape_.subgroups : 0;
  calibration_left_ = std::max(1, options_.calibration_steps);
  if (options_.static_fraction >= 0) phase_ = SharePhase::kFixed;
}

ShareChoice ShareController::At(uint64_t gpu_subgroups) const {
  ShareChoice c;
  c.slots = slots_;
  c.gpu_subgroups = std::min(gpu_subgroups, max_gpu_);
  c.predicted_seconds = PredictSeconds(shape_, rates_, c.gpu_subgroups, slots_);
  return c;
}

ShareChoice ShareController::Next() {
  switch (phase_) {
    case SharePhase::kFixed:
      current_ = FixedShare(shape_, rates_, options_.static_fraction);
      break;
    case SharePhase::kCalibrating:
      // Without rates for both sides the model cannot choose: probe with half on each.
      current_ = rates_.valid() ? ChooseShare(shape_, rates_) : FixedShare(shape_, rates_, 0.5);
      break;
    case SharePhase::kSearching:
      current_ = At(search_->Next());
      break;
    case SharePhase::kSettled:
      current_ = At(current_.gpu_subgroups);  // the held share, predicted from the latest rates
      break;
  }
  return current_;
}

void ShareController::BlendRates(const StepTiming& t) {
  Blend(&rates_.cpu_elems_per_s, t.cpu_elements,
        t.cpu_busy_seconds / static_cast<double>(options_.cpu_threads));
  Blend(&rates_.gpu_elems_per_s, t.gpu_elements, t.gpu_seconds);
  Blend(&rates_.h2d_bytes_per_s, t.h2d_bytes, t.h2d_seconds);
  Blend(&rates_.d2h_bytes_per_s, t.d2h_bytes, t.d2h_seconds);
}

void ShareController::Observe(const StepTiming& timing, double measured_seconds) {
  BlendRates(timing);
  switch (phase_) {
    case SharePhase::kFixed:
      return;
    case SharePhase::kCalibrating:
      // The first step pays for cold caches and first touches; later ones seed the search.
      if (calibration_seen_++ > 0) seeds_.emplace_back(current_.gpu_subgroups, measured_seconds);
      if (--calibration_left_ == 0) {
        const std::vector<std::pair<uint64_t, double>> seeds = std::move(seeds_);
        seeds_.clear();
        StartSearch(ChooseShare(shape_, rates_).gpu_subgroups, seeds);
      }
      return;
    case SharePhase::kSearching:
      return ObserveSearch(measured_seconds);
    case SharePhase::kSettled:
      return ObserveSettled(measured_seconds);
  }
}

void ShareController::StartSearch(uint64_t start,
                                  const std::vector<std::pair<uint64_t, double>>& seeds) {
  model_choice_ = ChooseShare(shape_, rates_);
  search_steps_ = 0;
  if (options_.search.max_steps <= 0 || max_gpu_ == 0) {
    search_.reset();
    current_ = At(start);
    settled_seconds_ = 0;  // taken from the next step
    phase_ = SharePhase::kSettled;
    RTFT_LOG(kInfo, kLogOffload) << "GPU share: " << current_.ToString() << " of "
                                 << shape_.subgroups << " (no measured search)";
    return;
  }
  search_.emplace(max_gpu_, start, options_.search);
  for (const auto& [g, seconds] : seeds) search_->Seed(g, seconds);
  phase_ = SharePhase::kSearching;
  RTFT_LOG(kInfo, kLogOffload) << "GPU share search: starting at " << start << "/"
                               << shape_.subgroups << " subgroups; the model chose "
                               << model_choice_.ToString() << "; at most "
                               << options_.search.max_steps << " steps";
  if (search_->done()) Settle();
}

void ShareController::ObserveSearch(double measured_seconds) {
  const uint64_t tried = current_.gpu_subgroups;
  search_->Report(tried, measured_seconds);
  RTFT_LOG(kInfo, kLogOffload) << "GPU share search step " << search_->steps() << ": " << tried
                               << "/" << shape_.subgroups << " subgroups measured "
                               << Ms(measured_seconds) << " ms (predicted "
                               << Ms(current_.predicted_seconds) << " ms); best so far "
                               << search_->best() << " at " << Ms(search_->best_seconds())
                               << " ms over " << search_->best_samples() << " steps";
  if (search_->done()) Settle();
}

void ShareController::Settle() {
  current_ = At(search_->best());
  settled_seconds_ = search_->best_seconds();
  search_steps_ = search_->steps();
  phase_ = SharePhase::kSettled;
  const double model_measured = search_->Mean(model_choice_.gpu_subgroups);
  std::ostringstream model;
  model << "the model's choice " << model_choice_.gpu_subgroups << " predicted "
        << Ms(model_choice_.predicted_seconds) << " ms, ";
  if (model_measured > 0) {
    model << "measured " << Ms(model_measured) << " ms";
  } else {
    model << "not measured";
  }
  RTFT_LOG(kInfo, kLogOffload) << "GPU share settled after " << search_steps_
                               << " search steps: " << current_.gpu_subgroups << "/"
                               << shape_.subgroups << " subgroups, measured "
                               << Ms(settled_seconds_) << " ms over " << search_->best_samples()
                               << " steps, model predicted " << Ms(current_.predicted_seconds)
                               << " ms; " << model.str();
  seeds_.clear();
}

void ShareController::ObserveSettled(double measured_seconds) {
  if (settled_seconds_ <= 0) {
    settled_seconds_ = measured_seconds;
    return;
  }
  const double off = std::abs(measured_seconds / settled_seconds_ - 1.0);
  if (off <= options_.drift_fraction) {
    seeds_.clear();
    return;
  }
  // Steps at the held share under the new conditions: the next search starts with them.
  seeds_.emplace_back(current_.gpu_subgroups, measured_seconds);
  if (static_cast<int>(seeds_.size()) < options_.drift_steps) return;
  ++recalibrations_;
  RTFT_LOG(kInfo, kLogOffload) << "GPU share: update time " << Ms(measured_seconds)
                               << " ms drifted from the settled " << Ms(settled_seconds_)
                               << " ms for " << seeds_.size() << " steps; searching again from "
                               << current_.gpu_subgroups << "/" << shape_.subgroups;
  const std::vector<std::pair<uint64_t, double>> seeds = std::move(seeds_);
  seeds_.clear();
  // From the held share: the model's error has been measured once; its new choice is logged.
  StartSearch(options_.search.max_steps > 0 ? current_.gpu_subgroups
                                            : ChooseShare(shape_, rates_).gpu_subgroups,
              seeds);
}

}  // namespace rtft::offload
