// Decides each step's GPU share for the interleaved optimizer: calibration steps measure the
// component rates, the performance model's choice from them starts a measured search over the
// share (ShareSearch), the best measured share is then held, and a search starts again when the
// measured update time drifts from the settled one. The optimizer core owns one per optimizer.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "offload/perf_model.h"
#include "offload/share_search.h"

namespace rtft::offload {

enum class SharePhase : uint8_t {
  kFixed,        // a static split: the share never changes
  kCalibrating,  // measuring the rates: a half-and-half probe, then the model's choice
  kSearching,    // measuring shares around the model's choice
  kSettled,      // holding the best measured share
};
const char* SharePhaseName(SharePhase phase);

struct ShareControllerOptions {
  int cpu_threads = 1;
  int calibration_steps = 3;
  double drift_fraction = 0.25;  // relative change of the update time that counts as drift
  int drift_steps = 3;           // steps running beyond drift_fraction before searching again
  double static_fraction = -1;   // >= 0: a static split (still measured)
  ShareSearchOptions search;     // search.max_steps == 0: hold the model's choice
};

class ShareController {
 public:
  ShareController(const OffloadShape& shape, const ShareControllerOptions& options);

  // The share for the next step; phase() says what kind of step it is.
  ShareChoice Next();
  // What the step run at the last Next() measured, and its update time.
  void Observe(const StepTiming& timing, double measured_seconds);

  SharePhase phase() const { return phase_; }
  const OffloadRates& rates() const { return rates_; }
  const OffloadShape& shape() const { return shape_; }
  // The model's choice that started the latest search.
  const ShareChoice& model_choice() const { return model_choice_; }
  // The held share's mean measured time (0 before the first search settled).
  double settled_seconds() const { return settled_seconds_; }
  // Steps the latest search took (0 while none settled).
  int search_steps() const { return search_steps_; }
  // Searches started again because the update time drifted.
  int recalibrations() const { return recalibrations_; }

 private:
  ShareChoice At(uint64_t gpu_subgroups) const;
  void BlendRates(const StepTiming& timing);
  void StartSearch(uint64_t start, const std::vector<std::pair<uint64_t, double>>& seeds);
  void ObserveSearch(double measured_seconds);
  void ObserveSettled(double measured_seconds);
  void Settle();

  OffloadShape shape_;
  ShareControllerOptions options_;
  int slots_ = 0;
  uint64_t max_gpu_ = 0;
  SharePhase phase_ = SharePhase::kCalibrating;
  int calibration_left_ = 0;
  int calibration_seen_ = 0;
  OffloadRates rates_;
  ShareChoice current_;
  ShareChoice model_choice_;
  std::optional<ShareSearch> search_;
  // Step times measured at one share outside a search, to seed the next one.
  std::vector<std::pair<uint64_t, double>> seeds_;
  double settled_seconds_ = 0;
  int search_steps_ = 0;
  int recalibrations_ = 0;
};

}  // namespace rtft::offload
