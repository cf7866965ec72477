// What the interleaved scheduler (gpu_engine.cc) keeps on the device: its CUDA status helper,
// device arrays freed together, the slots of master weights and moments, the per-subgroup
// events and their timing. Internal to src/offload/gpu.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/cuda_status.h"
#include "rtft/status.h"

namespace rtft::offload::gpu_detail {

inline Status Cuda(cudaError_t err, const char* what) {
  return CudaStatus(err, std::string("offload: ") + what);
}

struct DeviceArrays {
  std::vector<void*> ptrs;
  ~DeviceArrays() {
    for (void* p : ptrs) cudaFree(p);
  }
  StatusOr<float*> Alloc(size_t floats) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, floats * sizeof(float));
    if (err != cudaSuccess)
      return CudaStatus(
          err, "offload: cudaMalloc of " + std::to_string(floats * sizeof(float)) + " bytes");
    ptrs.push_back(p);
    return static_cast<float*>(p);
  }
};

struct Slot {
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

// Per-subgroup events, created once; timing is on so the model can be calibrated.
enum Ev {
  kInStart,
  kInDone,
  kRunStart,
  kRunDone,
  kOutStart,
  kOutDone,
  kGradStart,
  kGradDone,
  kEvs
};

inline float Elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ms / 1e3f;
}

}  // namespace rtft::offload::gpu_detail
