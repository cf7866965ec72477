#include "checkpoint/pinned_pool.h"

#include <sys/mman.h>

#include <cstring>

#include "checkpoint/device_copy.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/params.h"

namespace rtft {
namespace {
constexpr uint64_t kRegisterPiece = 1ull << 30;  // drivers refuse very large single registrations

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(uint64_t bytes, bool register_with_cuda) {
  if (bytes < kAlignment)
    return Status::InvalidArgument("pinned pool of " + FormatBytes(bytes) + " is too small");
  bytes = RoundUp(bytes, kAlignment);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return Status::FromErrno(errno, "allocating a pinned pool of " + FormatBytes(bytes));
  // Touch every page now: the pool is pre-allocated, and first-touch faults during a capture
  // would show up as capture time.
  std::memset(base, 0, bytes);
  std::unique_ptr<PinnedPool> pool(new PinnedPool(static_cast<char*>(base), bytes));
  if (register_with_cuda) pool->pinned_ = RegisterHostMemory(base, bytes, kRegisterPiece);
  RTFT_LOG(kInfo, kLogCkpt) << "pinned pool: " << FormatBytes(bytes)
                            << (pool->pinned_ ? ", registered with CUDA"
                                              : ", not registered with CUDA");
  return pool;
}

PinnedPool::PinnedPool(char* base, uint64_t capacity) : base_(base), capacity_(capacity) {}

PinnedPool::~PinnedPool() {
  if (pinned_) UnregisterHostMemory(base_, capacity_, kRegisterPiece);
  ::munmap(base_, capacity_);
}

bool PinnedPool::TryAllocateLocked(uint64_t bytes, uint64_t* offset) const {
  if (blocks_.empty()) {
    *offset = 0;
    return bytes <= capacity_;
  }
  if (tail_ > head_) {
    // Live blocks occupy [head_, tail_); free space is [tail_, capacity_) and then [0, head_).
    if (capacity_ - tail_ >= bytes) {
      *offset = tail_;
      return true;
    }
    if (head_ >= bytes) {
      *offset = 0;  // wrap; Allocate charges the skipped end to the newest block
      return true;
    }
    return false;
  }
  // Wrapped: live blocks occupy [head_, capacity_) and [0, tail_); free space is [tail_, head_).
  if (head_ - tail_ >= bytes) {
    *offset = tail_;
    return true;
  }
  return false;
}

StatusOr<PoolSpan> PinnedPool::Allocate(uint64_t bytes, std::chrono::milliseconds timeout) {
  const uint64_t need = RoundUp(bytes == 0 ? 1 : bytes, kAlignment);
  if (need > capacity_)
    return Status::InvalidArgument("a capture unit of " + FormatBytes(bytes) +
                                   " exceeds the pinned pool of " + FormatBytes(capacity_));
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
  if (blocks_.empty()) {
    head_ = offset;
  } else if (offset < tail_) {
    // Wrapped: the space skipped at the end is charged to the newest block and freed with it.
    blocks_.back().bytes += capacity_ - tail_;
    used_ += capacity_ - tail_;
  }
  blocks_.push_back(Block{next_id_++, offset, need, false});
  tail_ = offset + need;
  used_ += need;
  return PoolSpan{blocks_.back().id, base_ + offset, bytes};
}

void PinnedPool::Release(const PoolSpan& span) {
  std::lock_guard<std::mutex> lock(mu_);
  bool found = false;
  for (Block& b : blocks_) {
    if (b.id == span.id) {
      RTFT_CHECK(!b.released);
      b.released = true;
      found = true;
      break;
    }
  }
  RTFT_CHECK(found);
  while (!blocks_.empty() && blocks_.front().released) {
    used_ -= blocks_.front().bytes;
    blocks_.pop_front();
  }
  head_ = blocks_.empty() ? tail_ : blocks_.front().offset;
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
