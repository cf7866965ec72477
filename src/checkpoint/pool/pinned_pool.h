// The pinned host pool: one bounded, pre-allocated buffer that captured state waits in until the
// flush threads have written it. Allocation blocks while the pool is full (back-pressure on
// capture, never on the caller of Checkpoint()); memory never grows past the bound. Spans are
// released in any order, and a released span's space is reusable at once (first fit over the
// free ranges): with several flush threads finishing out of order, a ring buffer would keep
// space behind the oldest unfinished write, and a pool smaller than the state would leave the
// disk idle.
// When CUDA is present the buffer is registered with the driver in chunks, so device-to-host
// copies into it run at full PCIe bandwidth.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "rtft/status.h"

namespace rtft {

struct PoolSpan {
  uint64_t id = 0;
  char* data = nullptr;
  uint64_t bytes = 0;
};

class PinnedPool {
 public:
  // Spans start on this boundary (O_DIRECT needs it).
  static constexpr uint64_t kAlignment = 4096;
  // The buffer is registered with CUDA in segments of this size (drivers refuse very large
  // single registrations), and no span crosses a segment boundary, so every device copy lands in
  // one registration. It bounds the largest span.
  static constexpr uint64_t kSegmentBytes = 1ull << 30;

  // `register_with_cuda`: pin the buffer for the CUDA driver when a device is present.
  static StatusOr<std::unique_ptr<PinnedPool>> Create(uint64_t bytes, bool register_with_cuda,
                                                      uint64_t segment_bytes = kSegmentBytes);
  ~PinnedPool();

  // Waits until `bytes` (rounded up to kAlignment) fit, up to `timeout`. InvalidArgument when the
  // request exceeds the pool; Aborted after Shutdown().
  StatusOr<PoolSpan> Allocate(uint64_t bytes, std::chrono::milliseconds timeout);
  void Release(const PoolSpan& span);
  // Wakes every waiter with Aborted; later allocations fail too.
  void Shutdown();

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  bool pinned() const { return pinned_; }

 private:
  PinnedPool(char* base, uint64_t capacity, uint64_t segment);
  // Finds room without changing anything.
  bool TryAllocateLocked(uint64_t bytes, uint64_t* offset) const;
  // `at`, or the start of the next segment when [at, at + bytes) would cross a boundary.
  uint64_t FitInSegment(uint64_t at, uint64_t bytes) const;
  void TakeLocked(uint64_t offset, uint64_t bytes);
  void GiveBackLocked(uint64_t offset, uint64_t bytes);

  struct Block {
    uint64_t offset;
    uint64_t bytes;  // rounded up to kAlignment
  };

  char* base_;
  uint64_t capacity_;
  uint64_t segment_;
  bool pinned_ = false;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes; disjoint, never adjacent
  std::map<uint64_t, Block> live_;     // span id -> where it is
  uint64_t used_ = 0;
  uint64_t next_id_ = 1;
  bool shutdown_ = false;
};

}  // namespace rtft
