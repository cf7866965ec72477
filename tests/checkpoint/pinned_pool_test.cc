#include "checkpoint/pool/pinned_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

namespace rtft {
namespace {

using std::chrono::milliseconds;

TEST(PinnedPool, AlignedSpansAndOutOfOrderRelease) {
  auto pool = PinnedPool::Create(64 << 10, false);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto a = (*pool)->Allocate(10000, milliseconds(10));
  auto b = (*pool)->Allocate(20000, milliseconds(10));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % PinnedPool::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % PinnedPool::kAlignment, 0u);
  EXPECT_EQ(a->bytes, 10000u);
  EXPECT_EQ((*pool)->in_use(), 12288u + 20480u);
  // Releasing the newer span first frees its space at once.
  (*pool)->Release(*b);
  EXPECT_EQ((*pool)->in_use(), 12288u);
  (*pool)->Release(*a);
  EXPECT_EQ((*pool)->in_use(), 0u);
}

// The small-pool gap: flush threads finish out of order, and the space of a finished write must
// be reusable while an older one is still being written (a ring buffer kept it until the oldest
// was done, so capture waited and the disk went idle).
TEST(PinnedPool, SpaceOfALaterSpanIsReusableBeforeTheOldestIsReleased) {
  auto pool = PinnedPool::Create(32 << 10, false);
  ASSERT_TRUE(pool.ok());
  std::vector<PoolSpan> spans;
  for (int i = 0; i < 4; ++i) {
    auto s = (*pool)->Allocate(8 << 10, milliseconds(10));
    ASSERT_TRUE(s.ok()) << i;
    spans.push_back(*s);
  }
  // Full. The second and fourth writes finish first; the oldest is still being written.
  (*pool)->Release(spans[1]);
  (*pool)->Release(spans[3]);
  auto again = (*pool)->Allocate(8 << 10, milliseconds(0));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->data == spans[1].data || again->data == spans[3].data);
  auto more = (*pool)->Allocate(8 << 10, milliseconds(0));
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ((*pool)->Allocate(4096, milliseconds(0)).status().code(),
            StatusCode::kDeadlineExceeded);
  // Freed neighbours merge: two adjacent 8 KiB spans make room for 16 KiB.
  (*pool)->Release(spans[0]);
  (*pool)->Release(spans[2]);
  (*pool)->Release(*again);
  (*pool)->Release(*more);
  auto whole = (*pool)->Allocate(32 << 10, milliseconds(0));
  EXPECT_TRUE(whole.ok()) << whole.status();
  (*pool)->Release(*whole);
  EXPECT_EQ((*pool)->in_use(), 0u);
}

TEST(PinnedPool, BlocksWhenFullAndWrapsAround) {
  auto pool = PinnedPool::Create(16 << 10, false);
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Allocate(8 << 10, milliseconds(10));
  auto b = (*pool)->Allocate(4 << 10, milliseconds(10));
  ASSERT_TRUE(a.ok() && b.ok());
  // 4 KiB left at the end: 8 KiB does not fit until `a` is released, then goes to the start.
  auto full = (*pool)->Allocate(8 << 10, milliseconds(20));
  EXPECT_EQ(full.status().code(), StatusCode::kDeadlineExceeded);
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(30));
    (*pool)->Release(*a);
  });
  auto c = (*pool)->Allocate(8 << 10, milliseconds(2000));
  releaser.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data, a->data);  // the freed start
  (*pool)->Release(*b);
  (*pool)->Release(*c);
  EXPECT_EQ((*pool)->in_use(), 0u);
}

TEST(PinnedPool, SpansNeverCrossASegment) {
  // Four 16 KiB segments (CUDA registrations): 12 KiB spans start at segment boundaries.
  auto pool = PinnedPool::Create(64 << 10, false, 16 << 10);
  ASSERT_TRUE(pool.ok());
  std::vector<PoolSpan> spans;
  for (int i = 0; i < 4; ++i) {
    auto s = (*pool)->Allocate(12 << 10, milliseconds(10));
    ASSERT_TRUE(s.ok()) << i << s.status();
    spans.push_back(*s);
  }
  char* base = spans[0].data;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(spans[i].data - base, i * (16 << 10));
  EXPECT_EQ((*pool)->in_use(), 4u * (12 << 10));
  // The 4 KiB left at each segment's end still serve spans that fit there.
  auto tail = (*pool)->Allocate(4 << 10, milliseconds(10));
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ((tail->data - base) % (16 << 10), 12 << 10);
  (*pool)->Release(*tail);
  EXPECT_EQ((*pool)->Allocate(17 << 10, milliseconds(1)).status().code(),
            StatusCode::kInvalidArgument);
  for (auto& s : spans) (*pool)->Release(s);
  EXPECT_EQ((*pool)->in_use(), 0u);
}

TEST(PinnedPool, RefusesOversizeAndWakesOnShutdown) {
  auto pool = PinnedPool::Create(8 << 10, false);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->Allocate(9 << 10, milliseconds(1)).status().code(),
            StatusCode::kInvalidArgument);
  auto a = (*pool)->Allocate(8 << 10, milliseconds(1));
  ASSERT_TRUE(a.ok());
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(20));
    (*pool)->Shutdown();
  });
  EXPECT_EQ((*pool)->Allocate(4096, milliseconds(5000)).status().code(), StatusCode::kAborted);
  stopper.join();
  (*pool)->Release(*a);
}

// Producer/consumer stress: random sizes, releases in random order by two threads; the pool
// never hands out overlapping live spans and never exceeds its bound.
TEST(PinnedPool, StressNeverOverlapsOrExceedsTheBound) {
  const uint64_t capacity = 256 << 10;
  auto created = PinnedPool::Create(capacity, false, /*segment_bytes=*/64 << 10);
  ASSERT_TRUE(created.ok());
  PinnedPool& pool = **created;
  std::mutex mu;
  std::deque<PoolSpan> live;
  std::atomic<bool> done{false};
  std::atomic<int> overlaps{0};
  auto consumer = [&](int seed) {
    std::mt19937 rng(seed);
    for (;;) {
      PoolSpan s;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (live.empty()) {
          if (done) return;
          continue;
        }
        size_t i = rng() % live.size();
        s = live[i];
        live.erase(live.begin() + static_cast<long>(i));
      }
      // Every byte still holds the span's fill value: nobody else wrote into it.
      for (uint64_t k = 0; k < s.bytes; k += 511)
        if (static_cast<uint8_t>(s.data[k]) != static_cast<uint8_t>(s.id)) overlaps++;
      pool.Release(s);
    }
  };
  std::thread c1(consumer, 1), c2(consumer, 2);
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    auto s = pool.Allocate(1 + rng() % (48 << 10), milliseconds(5000));
    ASSERT_TRUE(s.ok()) << s.status();
    std::memset(s->data, static_cast<uint8_t>(s->id), s->bytes);
    EXPECT_LE(pool.in_use(), capacity);
    std::lock_guard<std::mutex> lock(mu);
    live.push_back(*s);
  }
  done = true;
  c1.join();
  c2.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace rtft
