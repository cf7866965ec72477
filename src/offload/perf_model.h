// The interleaved offload's performance model: given the CPU update rate, the GPU update rate
// and the two PCIe bandwidths, predicts one step's update time for each GPU share and picks the
// share (how many subgroups are streamed through the GPU) that minimizes it under a GPU memory
// budget. Pure arithmetic: the optimizer feeds it measurements, tests feed it synthetic rates.
#pragma once

#include <cstdint>
#include <string>

namespace rtft::offload {

struct OffloadRates {
  double cpu_elems_per_s = 0;     // all CPU update threads together
  double gpu_elems_per_s = 0;     // the GPU AdamW kernel
  double h2d_bytes_per_s = 0;     // pinned host to device
  double d2h_bytes_per_s = 0;     // device to pinned host
  double duplex_bytes_per_s = 0;  // both directions at once, together; 0: no joint limit
  bool valid() const {
    return cpu_elems_per_s > 0 && gpu_elems_per_s > 0 && h2d_bytes_per_s > 0 && d2h_bytes_per_s > 0;
  }
};

struct OffloadShape {
  uint64_t elements = 0;   // all subgroups together
  uint64_t subgroups = 0;  // each subgroup_elements, the last one possibly shorter
  uint64_t subgroup_elements = 0;
  uint64_t param_bytes = 2;       // bytes per element of the model's parameters
  uint64_t gpu_budget_bytes = 0;  // GPU memory for slots and gradient staging
};

// Bytes that move per element: optimizer state (master, m, v) each way for a GPU subgroup; fp32
// gradients down and updated parameters up for a CPU subgroup.
constexpr uint64_t kStateBytesPerElem = 12;
constexpr uint64_t kGradBytesPerElem = 4;
constexpr int kMaxSlots = 3;

// GPU memory the streamed path needs with `slots` state buffers (plus two gradient staging
// buffers for the CPU share).
uint64_t GpuBytesForSlots(const OffloadShape& shape, int slots);
// State buffers that fit in the budget, at most kMaxSlots; 0 means the GPU cannot take part.
int SlotsWithinBudget(const OffloadShape& shape);

struct ShareChoice {
  uint64_t gpu_subgroups = 0;
  int slots = 0;
  double predicted_seconds = 0;
  std::string ToString() const;
};

// Predicted update time with the first gpu_subgroups on the GPU, `slots` buffers deep.
double PredictSeconds(const OffloadShape& shape, const OffloadRates& rates, uint64_t gpu_subgroups,
                      int slots);
// The share that minimizes PredictSeconds under the budget (ties go to fewer GPU subgroups).
ShareChoice ChooseShare(const OffloadShape& shape, const OffloadRates& rates);
// A fixed fraction (static split), rounded to whole subgroups, with its prediction when rates
// are valid.
ShareChoice FixedShare(const OffloadShape& shape, const OffloadRates& rates, double fraction);

// What one step measured (the optimizer's GPU engine fills it in).
struct StepTiming {
  uint64_t cpu_elements = 0;
  double cpu_busy_seconds = 0;  // summed over threads, waiting excluded
  uint64_t gpu_elements = 0;
  double gpu_seconds = 0;  // kernel time
  uint64_t h2d_bytes = 0;
  double h2d_seconds = 0;
  uint64_t d2h_bytes = 0;
  double d2h_seconds = 0;
};

// Decides each step's share: a probe step with half the subgroups on each side, then the
// model's choice re-made after every calibration step; afterwards the choice stays until the
// measured time drifts from the prediction for three steps running, when it is made again from
// the latest rates. Rates are blended over steps (each new sample weighs one half).
class ShareController {
 public:
  // static_fraction >= 0 fixes the share (static split) but still measures.
  ShareController(const OffloadShape& shape, int cpu_threads, int calibration_steps,
                  double drift_fraction, double static_fraction);
  // The share for the next step; *calibrating says whether it is a calibration step.
  ShareChoice Next(bool* calibrating);
  void Observe(const StepTiming& timing, double measured_seconds);
  const OffloadRates& rates() const { return rates_; }
  const OffloadShape& shape() const { return shape_; }
  int recalibrations() const { return recalibrations_; }

 private:
  OffloadShape shape_;
  int cpu_threads_;
  int calibration_left_;
  double drift_;
  double static_fraction_;
  OffloadRates rates_;
  ShareChoice current_;
  bool have_choice_ = false;
  bool calibrating_ = false;
  int drift_steps_ = 0;
  int recalibrations_ = 0;
};

}  // namespace rtft::offload
