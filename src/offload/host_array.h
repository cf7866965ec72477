// Host memory for optimizer state: page-locked (cudaHostAlloc) when a CUDA device is present, so
// subgroups move over PCIe at full speed without staging, and plain 2 MiB-aligned memory
// otherwise. Zero-filled at allocation, so first-touch faults never land inside an update.
#pragma once

#include <cstddef>

#include "rtft/status.h"

namespace rtft::offload {

class HostArray {
 public:
  HostArray() = default;
  ~HostArray();
  HostArray(HostArray&& o) noexcept;
  HostArray& operator=(HostArray&& o) noexcept;
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;

  static StatusOr<HostArray> Allocate(size_t bytes, bool pinned);
  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

}  // namespace rtft::offload
