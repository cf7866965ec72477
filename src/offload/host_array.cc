#include "offload/host_array.h"
#include "core/build_config.h"

#include <sys/mman.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "checkpoint/capture/device_copy.h"

#if RTFT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda_status.h"
#endif

namespace rtft::offload {

HostArray::~HostArray() { Release(); }

HostArray::HostArray(HostArray&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      pinned_(std::exchange(o.pinned_, false)) {}

HostArray& HostArray::operator=(HostArray&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    pinned_ = std::exchange(o.pinned_, false);
  }
  return *this;
}

void HostArray::Release() {
  if (data_ == nullptr) return;
#if RTFT_WITH_CUDA
  if (pinned_) {
    cudaFreeHost(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

StatusOr<HostArray> HostArray::Allocate(size_t bytes, bool pinned) {
  HostArray a;
  a.bytes_ = bytes;
  if (bytes == 0) return a;
#if RTFT_WITH_CUDA
  if (pinned && CudaDevicePresent()) {
    cudaError_t err = cudaHostAlloc(&a.data_, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      a.data_ = nullptr;
      return CudaStatus(err,
                        "cudaHostAlloc of " + std::to_string(bytes) + " bytes for optimizer state");
    }
    a.pinned_ = true;
    std::memset(a.data_, 0, bytes);
    return a;
  }
#endif
  constexpr size_t kAlign = 2u << 20;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (posix_memalign(&a.data_, kAlign, rounded) != 0) {
    a.data_ = nullptr;
    return Status::ResourceExhausted("allocating " + std::to_string(bytes) +
                                     " bytes for optimizer state");
  }
  (void)madvise(a.data_, rounded, MADV_HUGEPAGE);
  std::memset(a.data_, 0, bytes);
  return a;
}

}  // namespace rtft::offload
