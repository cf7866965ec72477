#include "checkpoint/pool/pinned_pool.h"

#include <sys/mman.h>

#include <cstring>
#include <iterator>

#include "checkpoint/capture/device_copy.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/params.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; glibc 2.36's headers name it
#endif

namespace rtft {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(uint64_t bytes, bool register_with_cuda,
                                                         uint64_t segment_bytes) {
  if (segment_bytes < kAlignment || segment_bytes % kAlignment != 0)
    return Status::InvalidArgument("pool segment size must be a multiple of 4096");
  if (bytes < kAlignment)
    return Status::InvalidArgument("pinned pool of " + FormatBytes(bytes) + " is too small");
  bytes = RoundUp(bytes, kAlignment);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return Status::FromErrno(errno, "allocating a pinned pool of " + FormatBytes(bytes));
  // Every page now: the pool is pre-allocated, and first-touch faults during a capture would show
  // up as capture time. Faulted in by the kernel (MADV_POPULATE_WRITE, Linux 5.14), in huge pages
  // where the system allows them, rather than touched a 4 KiB page at a time: 12 MiB took 22 ms
  // instead of 37 ms, 256 MiB 0.46 s instead of 0.79 s on the 2-core machine, where every fault
  // is also the hypervisor's. Older kernels touch them. The memory is zero either way.
  (void)::madvise(base, bytes, MADV_HUGEPAGE);
  if (::madvise(base, bytes, MADV_POPULATE_WRITE) != 0) std::memset(base, 0, bytes);
  std::unique_ptr<PinnedPool> pool(
      new PinnedPool(static_cast<char*>(base), bytes, std::min(bytes, segment_bytes)));
  if (register_with_cuda) pool->pinned_ = RegisterHostMemory(base, bytes, pool->segment_);
  RTFT_LOG(kInfo, kLogCkpt) << "pinned pool: " << FormatBytes(bytes)
                            << (pool->pinned_ ? ", registered with CUDA"
                                              : ", not registered with CUDA");
  return pool;
}

PinnedPool::PinnedPool(char* base, uint64_t capacity, uint64_t segment)
    : base_(base), capacity_(capacity), segment_(segment) {
  free_.emplace(0, capacity);
}

PinnedPool::~PinnedPool() {
  if (pinned_) UnregisterHostMemory(base_, capacity_, segment_);
  ::munmap(base_, capacity_);
}

uint64_t PinnedPool::FitInSegment(uint64_t at, uint64_t bytes) const {
  const uint64_t segment_end = (at / segment_ + 1) * segment_;
  return at + bytes <= segment_end ? at : segment_end;
}

bool PinnedPool::TryAllocateLocked(uint64_t bytes, uint64_t* offset) const {
  for (const auto& [start, size] : free_) {
    const uint64_t at = FitInSegment(start, bytes);
    if (at + bytes <= start + size) {
      *offset = at;
      return true;
    }
  }
  return false;
}

// Carves [offset, offset + bytes) out of the free range holding it.
void PinnedPool::TakeLocked(uint64_t offset, uint64_t bytes) {
  auto it = std::prev(free_.upper_bound(offset));
  const uint64_t start = it->first, end = it->first + it->second;
  RTFT_CHECK(start <= offset && offset + bytes <= end);
  free_.erase(it);
  if (start < offset) free_.emplace(start, offset - start);
  if (offset + bytes < end) free_.emplace(offset + bytes, end - offset - bytes);
}

// Returns [offset, offset + bytes) to the free ranges, merged with its neighbours.
void PinnedPool::GiveBackLocked(uint64_t offset, uint64_t bytes) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

StatusOr<PoolSpan> PinnedPool::Allocate(uint64_t bytes, std::chrono::milliseconds timeout) {
  const uint64_t need = RoundUp(bytes == 0 ? 1 : bytes, kAlignment);
  if (need > segment_)
    return Status::InvalidArgument("a capture unit of " + FormatBytes(bytes) +
                                   " exceeds the pinned pool's largest span of " +
                                   FormatBytes(segment_));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t offset = 0;
  for (;;) {
    if (shutdown_) return Status::Aborted("pinned pool is shut down");
    if (TryAllocateLocked(need, &offset)) break;
    if (freed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (TryAllocateLocked(need, &offset)) break;
      return Status::DeadlineExceeded("waited too long for " + FormatBytes(need) +
                                      " of pinned pool space");
    }
  }
  TakeLocked(offset, need);
  const uint64_t id = next_id_++;
  live_.emplace(id, Block{offset, need});
  used_ += need;
  return PoolSpan{id, base_ + offset, bytes};
}

void PinnedPool::Release(const PoolSpan& span) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(span.id);
  RTFT_CHECK(it != live_.end());  // released twice, or never allocated here
  GiveBackLocked(it->second.offset, it->second.bytes);
  used_ -= it->second.bytes;
  live_.erase(it);
  freed_.notify_all();
}

void PinnedPool::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  freed_.notify_all();
}

uint64_t PinnedPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace rtft
