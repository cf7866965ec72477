// The core thread type and the exception guard every background loop runs under
// (src/core/thread.h), and the registry of threads that must end before the process does.
#include "core/thread.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace rtft {
namespace {

TEST(RunGuarded, AnEscapingExceptionBecomesAStatus) {
  EXPECT_TRUE(RunGuarded("a loop", [] {}).ok());
  EXPECT_EQ(RunGuarded("a loop", [] { return Status::DataLoss("own"); }).code(),
            StatusCode::kDataLoss);
  Status s = RunGuarded("a loop", [] { throw std::runtime_error("bad byte in a name"); });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("a loop ended by an exception: bad byte in a name"), std::string::npos)
      << s;
  s = RunGuarded(std::string("a loop"), []() -> Status { throw 42; });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("unknown type"), std::string::npos) << s;
}

TEST(Thread, RunsNamedAndJoinsAndKeepsWhatEscaped) {
  char name[16] = {};
  auto t = Thread::Start("rtft-test-name-that-is-long",
                         [&] { pthread_getname_np(pthread_self(), name, sizeof(name)); });
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->running());
  t->Join();
  EXPECT_TRUE(t->finished());
  EXPECT_STREQ(name, "rtft-test-name-");  // the kernel keeps 15 characters
  EXPECT_TRUE(t->status().ok());

  auto bad = Thread::Start("rtft-test-bad", [] { throw std::logic_error("boom"); });
  ASSERT_TRUE(bad.ok());
  bad->Join();
  EXPECT_EQ(bad->status().code(), StatusCode::kInternal);
  EXPECT_NE(bad->status().message().find("boom"), std::string::npos) << bad->status();
}

TEST(Thread, MovingIntoARunningThreadJoinsItFirst) {
  std::atomic<int> ran{0};
  Thread t = *Thread::Start("rtft-a", [&] { ++ran; });
  t = *Thread::Start("rtft-b", [&] { ++ran; });
  t.Join();
  EXPECT_EQ(ran.load(), 2);
  Thread none;
  none.Join();  // a thread that never started joins at once
  EXPECT_FALSE(none.running());
}

TEST(Linger, DrainWaitsForEveryLingeringThread) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    Linger(*Thread::Start("rtft-linger", [&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
      ++done;
    }));
  }
  EXPECT_EQ(done.load(), 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  DrainLingering();
  EXPECT_EQ(done.load(), 3);
  DrainLingering();  // nothing left: returns at once
}

}  // namespace
}  // namespace rtft
