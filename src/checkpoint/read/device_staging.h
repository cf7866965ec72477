// Streams saved tensors into device memory through one bounded staging buffer in host memory
// (pinned when CUDA is present), so a device tensor of any size restores with staging memory
// only. Restore uses it for device tensors restored without resharding, one tensor at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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

  // One saved tensor to stream: `entry` of `reader` into `dst`, device memory of `copier`'s
  // device.
  struct Item {
    const CheckpointFileReader* reader;
    const TensorEntry* entry;
    DeviceCopier* copier;
    void* dst;
  };

  // Reads each item chunk by chunk (each checked with `verify` before it leaves host memory) and
  // copies it to its device memory. When the buffer holds two of the largest chunk, it is used as
  // two halves: a reader thread fills one (O_DIRECT where the file allows) while the other is
  // checked and copied, across the items, so the disk never waits for a checksum, a copy or the
  // next tensor; otherwise reads and copies alternate. Copies leave in order. Returns once every
  // copy is complete. Not thread-safe: one call at a time.
  Status Stream(const std::vector<Item>& items, bool verify);
  // One tensor.
  Status Stream(const CheckpointFileReader& reader, const TensorEntry& entry, bool verify,
                DeviceCopier* copier, void* dst) {
    return Stream({Item{&reader, &entry, copier, dst}}, verify);
  }

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
