// Optimizer offload (after Deep Optimizer States): an AdamW optimizer whose fp32 master weights,
// momentum and variance live in pinned host memory, split into subgroups. Each step some
// subgroups are updated on the GPU (copied in and out on their own streams) while CPU threads
// update the others with a vectorized AdamW; a performance model's choice of the GPU share starts
// a search on measured step times, which settles on the fastest share. Trainers create one per
// rank; the checkpoint engine saves it through state_provider().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rtft/export.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

// Same meaning and defaults as torch.optim.AdamW (amsgrad=False, maximize=False).
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
};

// One model parameter that the optimizer updates in place. Its gradient, passed to Step(), has
// grad_dtype and lives in the same memory as the parameter.
struct OffloadParam {
  std::string name;                    // unique; names the optimizer tensors in checkpoints
  DType dtype = DType::kFloat32;       // kFloat32, kFloat16 or kBFloat16 (float64: refused)
  DType grad_dtype = DType::kFloat32;  // kFloat32, kFloat16 or kBFloat16
  void* data = nullptr;
  uint64_t elements = 0;
  std::vector<int64_t> shape;  // optional; empty means {elements}
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;  // CUDA device ordinal when memory == kDevice; all parameters share it
  // Where this parameter sits in the whole model's tensor when each rank's optimizer updates one
  // shard of it (ZeRO-1): the optimizer's master weights and moments of it are that shard, and
  // state_provider() describes them with these coordinates (so the Protector and the checkpoint
  // engine treat them as sharded, not replicated). Empty: the parameter is whole. Its rank must
  // be the shape's (a 1-d {elements} when `shape` is empty).
  ShardCoords shard;
};

enum class OffloadMode : uint8_t {
  kCpu,          // every subgroup on the CPU
  kGpu,          // state resident in GPU memory, updated there (the ceiling; no host copies)
  kInterleaved,  // GPU share streamed through the GPU, the rest on the CPU
};

RTFT_EXPORT const char* OffloadModeName(OffloadMode mode);
// "cpu", "gpu", "interleaved".
RTFT_EXPORT bool ParseOffloadMode(const std::string& text, OffloadMode* mode);

struct OffloadOptions {
  AdamWConfig adamw;
  OffloadMode mode = OffloadMode::kInterleaved;
  // Elements per subgroup; 0 reads RTFT_OFFLOAD_SUBGROUP_ELEMENTS.
  uint64_t subgroup_elements = 0;
  // CPU update threads (the caller's thread is one of them); 0 reads RTFT_OFFLOAD_CPU_THREADS.
  int cpu_threads = 0;
  // GPU memory the optimizer may use for state and staging; 0 reads RTFT_OFFLOAD_GPU_BUDGET.
  uint64_t gpu_budget_bytes = 0;
  // Interleaved only: a fixed fraction of subgroups on the GPU instead of the model's choice
  // (in [0, 1]; negative: let the model choose). Used by the benchmark's static-split sweep.
  double static_gpu_fraction = -1.0;
  // "auto" (best the CPU supports), "avx512", "avx2" or "scalar"; empty reads
  // RTFT_OFFLOAD_CPU_KERNEL.
  std::string cpu_kernel;
  // Prefix of the tensor and object names in the state description.
  std::string state_prefix = "optimizer";
};

// What the last Step() did and how long it took.
struct OffloadStepStats {
  int64_t step = 0;
  double seconds = 0;            // wall time of Step()
  double predicted_seconds = 0;  // the performance model's prediction (0 when none)
  uint64_t gpu_subgroups = 0;
  uint64_t cpu_subgroups = 0;
  uint64_t gpu_elements = 0;
  uint64_t cpu_elements = 0;
  bool calibrating = false;  // the share was a calibration probe, not the model's choice
  bool searching = false;    // the share was one the measured search tried, not the held one
  uint64_t model_gpu_subgroups = 0;  // the performance model's choice: where the search started
};

class RTFT_EXPORT OffloadOptimizer {
 public:
  // Copies the parameters' current values into the fp32 master copy. The parameter memory must
  // outlive the optimizer.
  static StatusOr<std::unique_ptr<OffloadOptimizer>> Create(std::vector<OffloadParam> params,
                                                            const OffloadOptions& options);
  virtual ~OffloadOptimizer();

  // One AdamW step with grads[i] for params[i] (grad_dtype, same memory as the parameter). The
  // gradients must be complete: device work queued before the call is synchronized first. On
  // return every parameter holds its updated value. An error leaves the step count unchanged but
  // may leave a step half applied: restore state before continuing.
  virtual Status Step(const std::vector<const void*>& grads) = 0;

  virtual void set_lr(double lr) = 0;
  virtual const AdamWConfig& config() const = 0;
  virtual int64_t step_count() const = 0;
  virtual OffloadMode mode() const = 0;
  virtual uint64_t subgroups() const = 0;
  virtual uint64_t elements() const = 0;
  virtual const OffloadStepStats& last_step() const = 0;
  // The CPU kernel in use: "avx512", "avx2" or "scalar".
  virtual const char* cpu_kernel() const = 0;

  // Master weights, momentum and variance (fp32, one tensor of each per parameter, named
  // "<prefix>/{master,exp_avg,exp_avg_sq}/<param>", with the parameter's shard coordinates) and
  // the step count ("<prefix>/step"). Describe between steps; the provider keeps the state alive.
  // Its Restored(), which rtft::Restore and the Protector call after a restore, runs
  // SyncParamsFromMaster() (FAILED_PRECONDITION once the optimizer is destroyed).
  virtual std::shared_ptr<StateProvider> state_provider() = 0;
  // Writes the master weights back into the model's parameters (rounded to their dtype): after
  // the state was restored through state_provider().
  virtual Status SyncParamsFromMaster() = 0;
  // Copies parameter i's fp32 master weights into out (elements floats on the host).
  virtual Status ReadMaster(size_t param, float* out) const = 0;
};

}  // namespace rtft
