// CUDA kernels of the offloaded optimizer: AdamW over one span of device memory (the same
// operations as the CPU kernels, every multiply-add an explicit fused one, so GPU and CPU results
// agree to the bit), and the dtype conversions that widen gradients before they go to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "offload/cpu/cpu_adam.h"

namespace rtft::offload {

// a.master/m/v, a.grad and a.low are device pointers.
cudaError_t LaunchAdamW(const AdamWStep& s, const AdamWSpan& a, cudaStream_t stream);
cudaError_t LaunchToFloat(const void* src, DType dtype, float* dst, size_t n, cudaStream_t stream);
cudaError_t LaunchFromFloat(const float* src, void* dst, DType dtype, size_t n,
                            cudaStream_t stream);

}  // namespace rtft::offload
