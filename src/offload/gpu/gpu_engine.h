// The GPU side of the offloaded optimizer (CUDA builds only): the interleaved scheduler that
// streams the GPU share of subgroups through device buffers while CPU threads update the rest,
// and the resident mode that keeps all state in device memory. The optimizer core (optimizer.cc)
// owns the state and decides the share; this unit moves bytes and launches kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "offload/cpu/cpu_adam.h"
#include "offload/optimizer_state.h"
#include "offload/perf_model.h"
#include "rtft/status.h"

namespace rtft::offload {

struct CpuWorkers {
  ThreadPool* pool = nullptr;  // null: the caller's thread alone
  AdamWKernelFn kernel = nullptr;
  int threads = 1;
};

class GpuEngine {
 public:
  virtual ~GpuEngine() = default;
  // Device buffers available for streamed subgroups (0: the GPU takes no share).
  virtual int slots() const = 0;
  // master = the device parameters, widened to fp32.
  virtual Status LoadMasterFromParams() = 0;
  // The device parameters = master, rounded to their dtype.
  virtual Status WriteParamsFromMaster() = 0;
  // Moves master/m/v into device memory for good (OffloadMode::kGpu).
  virtual Status MakeResident() = 0;
  // One update: resident, or the first gpu_subgroups streamed through the GPU and the others on
  // the CPU workers. Returns once the parameters on the device are updated.
  virtual Status Step(const AdamWStep& s, const std::vector<const void*>& grads,
                      uint64_t gpu_subgroups, StepTiming* timing) = 0;
  virtual Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
};

StatusOr<std::unique_ptr<GpuEngine>> CreateGpuEngine(std::shared_ptr<OptimizerState> state,
                                                     const CpuWorkers& cpu, uint64_t budget_bytes);

}  // namespace rtft::offload
