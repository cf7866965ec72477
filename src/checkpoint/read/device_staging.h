// Streams saved tensors into device memory through one bounded staging buffer in host memory
// (pinned when CUDA is present), so a device tensor of any size restores with staging memory
// only. Restore uses it for device tensors restored without resharding, one tensor at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "checkpoint/capture/device_copy.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/read/reader.h"
#include "rtft/status.h"

namespace rtft {

class DeviceStaging {
 public:
  // A buffer of `bytes`, or of `min_bytes` when that is larger: a chunk's checksum covers all of
  // it, so the buffer must hold the largest chunk it will stream whole.
  static StatusOr<std::unique_ptr<DeviceStaging>> Create(uint64_t bytes, uint64_t min_bytes);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Reads `entry` from `reader` chunk by chunk (each checked with `verify` before it leaves host
  // memory) and copies it to `dst`, device memory of `copier`'s device. When the buffer holds two
  // of the tensor's chunks, it is used as two halves and reading one overlaps copying the other;
  // otherwise reads and copies alternate. Returns once every copy is complete. Not thread-safe:
  // one tensor at a time.
  Status Stream(const CheckpointFileReader& reader, const TensorEntry& entry, bool verify,
                DeviceCopier* copier, void* dst);

  uint64_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  DeviceStaging(char* base, uint64_t bytes, bool pinned)
      : base_(base), bytes_(bytes), pinned_(pinned) {}

  char* base_;
  uint64_t bytes_;
  bool pinned_;
};

}  // namespace rtft
