#include "bench/common/gpu_util.h"
#include "core/build_config.h"

#if RTFT_WITH_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "bench/common/bench_util.h"
#include "core/cuda_status.h"
#endif

namespace rtft::bench {

#if RTFT_WITH_CUDA

Status CheckGpuUsable() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return Status::FailedPrecondition(std::string("no usable CUDA device: ") +
                                      cudaGetErrorString(err));
  if (count == 0) return Status::FailedPrecondition("no CUDA device on this machine");
  return CudaStatus(cudaSetDevice(0), "cudaSetDevice(0)");
}

StatusOr<void*> GpuAlloc(size_t bytes) {
  void* p = nullptr;
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"));
  return p;
}

void GpuFree(void* ptr) {
  if (ptr) cudaFree(ptr);
}

Status GpuFill(void* ptr, size_t bytes, int value) {
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaMemset(ptr, value, bytes), "cudaMemset"));
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Status GpuCopyToHost(void* dst, const void* src, size_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

StatusOr<double> PinnedD2HGbps(size_t bytes) {
  RTFT_ASSIGN_OR_RETURN(void* dev, GpuAlloc(bytes));
  void* host = nullptr;
  Status st = CudaStatus(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::vector<double> gbps;
  if (st.ok()) st = GpuFill(dev, bytes, 0x5a);
  if (st.ok()) st = GpuCopyToHost(host, dev, bytes);  // warm-up
  for (int i = 0; st.ok() && i < 5; ++i) {
    const auto start = Clock::now();
    st = GpuCopyToHost(host, dev, bytes);
    gbps.push_back(Gbps(bytes, SecondsSince(start)));
  }
  if (host) cudaFreeHost(host);
  GpuFree(dev);
  RTFT_RETURN_IF_ERROR(st);
  return Median(gbps);
}

#else  // !RTFT_WITH_CUDA

namespace {
Status NoCuda() {
  return Status::Unimplemented("this rtft-bench was built without CUDA (RTFT_WITH_CUDA=OFF)");
}
}  // namespace

Status CheckGpuUsable() { return NoCuda(); }
StatusOr<void*> GpuAlloc(size_t) { return NoCuda(); }
void GpuFree(void*) {}
Status GpuFill(void*, size_t, int) { return NoCuda(); }
Status GpuCopyToHost(void*, const void*, size_t) { return NoCuda(); }
StatusOr<double> PinnedD2HGbps(size_t) { return NoCuda(); }

#endif  // RTFT_WITH_CUDA

}  // namespace rtft::bench
