// The interleaved offload's performance model: given the CPU update rate, the GPU update rate
// and the two PCIe bandwidths, predicts one step's update time for each GPU share and picks the
// share (how many subgroups are streamed through the GPU) that minimizes it under a GPU memory
// budget. Pure arithmetic: the share controller feeds it measurements, tests feed it synthetic
// rates. The model is the controller's starting guess; the measured search has the last word.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  double h2d_seconds = 0;  // the union of the direction's copy intervals (see UnionSeconds)
  uint64_t d2h_bytes = 0;
  double d2h_seconds = 0;
};

// Time the intervals cover together, overlaps counted once: several streams share one copy
// direction, so the link was busy for the union of their copies, not for the sum.
struct Interval {
  double begin = 0;
  double end = 0;
};
double UnionSeconds(std::vector<Interval> intervals);

}  // namespace rtft::offload
