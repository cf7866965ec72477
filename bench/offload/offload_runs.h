// The measurements behind `rtft-bench offload`: host memory bandwidth (a STREAM triad), the CPU
// AdamW kernels' throughput on host arrays, and timed steps of the offloaded optimizer in one
// mode on one model that stays allocated (device or host memory) across variants.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rtft/offload.h"
#include "rtft/status.h"

namespace rtft::bench {

struct TriadResult {
  double gbps = 0;  // counted as STREAM does: three arrays of 4-byte elements per iteration
  // What the memory really moved: the stored array is also read first (write-allocate), so
  // four arrays. The AdamW kernel reads every array it writes, so this is its yardstick.
  double gbps_moved = 0;
  uint64_t bytes = 0;
  int threads = 0;
};
StatusOr<TriadResult> RunTriad(uint64_t elements, int threads, int repeat);

struct KernelResult {
  std::string isa;
  int threads = 0;
  double params_per_s = 0;
};
// The bare CPU AdamW kernel on host arrays (no copies), `threads` threads, median of `repeat`.
StatusOr<KernelResult> RunCpuKernel(const std::string& isa, uint64_t elements, DType dtype,
                                    int threads, int repeat);

// A model of `elements` parameters in one tensor per 64 Mi elements, with gradients, in device
// memory when `device` (else host memory).
class BenchModel {
 public:
  static StatusOr<std::unique_ptr<BenchModel>> Create(uint64_t elements, DType dtype, bool device);
  ~BenchModel();
  std::vector<OffloadParam> params() const { return params_; }
  const std::vector<const void*>& grads() const { return grads_; }
  bool device() const { return device_; }

 private:
  bool device_ = false;
  std::vector<OffloadParam> params_;
  std::vector<const void*> grads_;
  std::vector<void*> owned_;
};

struct StepResult {
  double update_s = 0;     // median over the measured steps
  double predicted_s = 0;  // the model's prediction for the last step (0: none)
  uint64_t gpu_subgroups = 0;
  uint64_t subgroups = 0;
  std::string cpu_kernel;
  // Interleaved with the share chosen online: the steps until the share was held (calibration
  // and search), whether it was held before measuring, the model's own choice, and whether a
  // drift started a search again during the measured steps.
  int settle_steps = 0;
  bool settled = true;
  uint64_t model_gpu_subgroups = 0;
  bool searched_while_measuring = false;
};
// `warmup` unmeasured steps, more while the share is still being calibrated or searched (at most
// max_settle_steps in all), then `steps` measured ones.
StatusOr<StepResult> RunOptimizer(const BenchModel& model, const OffloadOptions& options,
                                  int warmup, int steps, int max_settle_steps);

}  // namespace rtft::bench
