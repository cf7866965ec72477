// The coordinator's key-value store on its own: a put answers the gets of its key alone, in the
// order they came; deadlines expire gets in their order; the limits on bytes and waiting gets.
#include "control/coordinator/kv_store.h"

#include <gtest/gtest.h>

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

KvWaiter Wait(const std::string& peer, uint64_t req, const std::string& key,
              SteadyClock::time_point deadline) {
  return KvWaiter{peer, req, key, deadline};
}

TEST(KvStore, APutAnswersTheGetsOfItsKeyAloneInTheOrderTheyCame) {
  KvStore kv;
  const auto later = SteadyClock::now() + milliseconds(60000);
  // Interleaved waiters of three keys, the earliest deadline last.
  for (uint64_t r = 0; r < 30; ++r) {
    auto got = kv.Get(
        Wait("p" + std::to_string(r), r, "k" + std::to_string(r % 3), later - milliseconds(r)));
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->has_value());
  }
  auto ready = kv.Put("k1", "one");
  ASSERT_TRUE(ready.ok());
  ASSERT_EQ(ready->size(), 10u);
  for (size_t i = 0; i < ready->size(); ++i) {
    EXPECT_EQ((*ready)[i].key, "k1");
    EXPECT_EQ((*ready)[i].req, 1 + 3 * i);  // arrival order, not deadline order
  }
  // Answered once: a second put of the key finds nobody waiting.
  EXPECT_TRUE(kv.Put("k1", "again")->empty());
  // A key nobody waits for.
  EXPECT_TRUE(kv.Put("other", "x")->empty());
  // A get of a key that is there is answered at once and never waits.
  auto now = kv.Get(Wait("q", 99, "k1", later));
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ(**now, "again");
  EXPECT_EQ(kv.Put("k2", "two")->size(), 10u);
  EXPECT_EQ(kv.Put("k0", "zero")->size(), 10u);
  EXPECT_FALSE(kv.NextDeadline().has_value());
}

TEST(KvStore, DeadlinesExpireGetsInTheirOrderAndAPutAfterFindsNone) {
  KvStore kv;
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(kv.Get(Wait("a", 1, "k", t0 + milliseconds(30))).ok());
  ASSERT_TRUE(kv.Get(Wait("b", 2, "k", t0 + milliseconds(10))).ok());
  ASSERT_TRUE(kv.Get(Wait("c", 3, "j", t0 + milliseconds(20))).ok());
  ASSERT_EQ(kv.NextDeadline(), std::optional<SteadyClock::time_point>(t0 + milliseconds(10)));
  EXPECT_TRUE(kv.Expire(t0).empty());
  auto gone = kv.Expire(t0 + milliseconds(20));
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].req, 2u);
  EXPECT_EQ(gone[1].req, 3u);
  EXPECT_TRUE(kv.Put("j", "v")->empty());  // its waiter expired
  auto ready = kv.Put("k", "v");
  ASSERT_EQ(ready->size(), 1u);
  EXPECT_EQ((*ready)[0].req, 1u);
  EXPECT_TRUE(kv.Expire(t0 + milliseconds(1000)).empty());
}

TEST(KvStore, TheLimitsOnBytesAndWaitingGets) {
  KvStore kv(/*max_bytes=*/100, /*max_waiters=*/2);
  EXPECT_TRUE(kv.Put("a", std::string(90, 'x')).ok());
  EXPECT_EQ(kv.Put("b", std::string(20, 'x')).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(kv.Put("a", std::string(10, 'x')).ok());  // a replacement frees its old bytes
  EXPECT_TRUE(kv.Put("b", std::string(20, 'x')).ok());
  const auto later = SteadyClock::now() + milliseconds(60000);
  EXPECT_TRUE(kv.Get(Wait("p", 1, "w1", later)).ok());
  EXPECT_TRUE(kv.Get(Wait("p", 2, "w2", later)).ok());
  EXPECT_EQ(kv.Get(Wait("p", 3, "w3", later)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.Put("w1", "")->size(), 1u);  // one answered: room for another
  EXPECT_TRUE(kv.Get(Wait("p", 4, "w3", later)).ok());
}

}  // namespace
}  // namespace rtft::control
