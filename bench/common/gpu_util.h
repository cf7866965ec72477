// The few CUDA runtime calls the benchmarks make: device buffers for GPU-resident state, a
// blocking device-to-host copy (the naive baseline) and the pinned PCIe bandwidth that GPU
// capture is judged against. Builds without CUDA get stubs that explain why there is no GPU.
#pragma once

#include <cstddef>

#include "rtft/status.h"

namespace rtft::bench {

// OK when this build has CUDA and device 0 can be used; otherwise says why not.
Status CheckGpuUsable();

StatusOr<void*> GpuAlloc(size_t bytes);
void GpuFree(void* ptr);
// Sets every byte to `value`, synchronously.
Status GpuFill(void* ptr, size_t bytes, int value);
// Blocking cudaMemcpy into any host memory (pageable in the naive baseline).
Status GpuCopyToHost(void* dst, const void* src, size_t bytes);
// Device-to-host bandwidth of a plain cudaMemcpy into cudaHostAlloc'd memory, in GB/s; the
// median of a few copies of `bytes` after a warm-up.
StatusOr<double> PinnedD2HGbps(size_t bytes);

}  // namespace rtft::bench
