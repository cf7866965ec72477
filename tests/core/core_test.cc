#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/params.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "rtft/status.h"

namespace rtft {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  RTFT_ASSIGN_OR_RETURN(int h, Half(x));
  RTFT_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, EveryCodeUpToTheLastHasANameAndNoneAfterIt) {
  // Decoders of codes from other processes accept 0..kLastStatusCode: a code added after it
  // would arrive as INTERNAL.
  const int last = static_cast<int>(kLastStatusCode);
  for (int c = 0; c <= last; ++c)
    EXPECT_STRNE(StatusCodeName(static_cast<StatusCode>(c)), "UNKNOWN") << c;
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(last + 1)), "UNKNOWN");
}

TEST(Status, CodesAndMacros) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status s = Quarter(6, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: odd");
  EXPECT_EQ(s.Annotate("ctx").message(), "ctx: odd");
  EXPECT_EQ(Status::FromErrno(ENOSPC, "w").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(EROFS, "w").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Status::FromErrno(ENOENT, "w").code(), StatusCode::kNotFound);
  StatusOr<std::vector<int>> v = std::vector<int>{1, 2};
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 2u);
}

TEST(StatusOrDeathTest, ValueOfAnErrorEndsTheProcessWithTheStatusAndTheCallersLine) {
  StatusOr<int> odd = Half(3);
  const int line = __LINE__ + 1;
  EXPECT_DEATH((void)odd.value(), "core_test.cc:" + std::to_string(line) +
                                      ": StatusOr::value\\(\\) on an error: INVALID_ARGUMENT: odd");
  EXPECT_DEATH((void)*odd, "dereferenced on an error.*INVALID_ARGUMENT: odd");
  StatusOr<std::vector<int>> none = Status::NotFound("nothing here");
  EXPECT_DEATH((void)none->size(), "dereferenced on an error.*NOT_FOUND: nothing here");
  EXPECT_DEATH((void)std::move(none).value(), "NOT_FOUND: nothing here");
  // A value is handed out as before.
  EXPECT_EQ(Half(4).value(), 2);
}

TEST(Params, BytesParsing) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64K"), 64u * 1024);
  EXPECT_EQ(*ParseBytes("1.5G"), 1536ull * 1024 * 1024);
  EXPECT_EQ(*ParseBytes("2GiB"), 2ull << 30);
  EXPECT_FALSE(ParseBytes("-1").ok());
  EXPECT_FALSE(ParseBytes("12Q").ok());
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
}

TEST(Params, EnvironmentAndDefaults) {
  unsetenv("RTFT_CKPT_FLUSH_THREADS");
  ReloadParams();
  EXPECT_EQ(*ParamInt(Param::kCkptFlushThreads), 4);
  EXPECT_FALSE(ParamIsSet(Param::kCkptFlushThreads));
  setenv("RTFT_CKPT_FLUSH_THREADS", "7", 1);
  // Read once: a change is seen after ReloadParams() only.
  EXPECT_EQ(*ParamInt(Param::kCkptFlushThreads), 4);
  ReloadParams();
  EXPECT_EQ(*ParamInt(Param::kCkptFlushThreads), 7);
  EXPECT_TRUE(ParamIsSet(Param::kCkptFlushThreads));
  setenv("RTFT_CKPT_FLUSH_THREADS", "seven", 1);
  ReloadParams();
  Status bad = ParamInt(Param::kCkptFlushThreads).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("RTFT_CKPT_FLUSH_THREADS"), std::string::npos);
  unsetenv("RTFT_CKPT_FLUSH_THREADS");
  ReloadParams();
  for (const ParamInfo& p : AllParams()) {
    EXPECT_EQ(std::string(p.env).rfind("RTFT_", 0), 0u) << p.env;
    EXPECT_GT(std::string(p.description).size(), 10u) << p.env;
  }
}

TEST(Checksum, MatchesStreamingAndHex) {
  std::vector<char> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131);
  uint64_t whole = Xxh3(data.data(), data.size());
  Xxh3Hasher h;
  h.Update(data.data(), 12345);
  h.Update(data.data() + 12345, data.size() - 12345);
  EXPECT_EQ(h.Digest(), whole);
  // Known answer: XXH3-64 of the empty input.
  EXPECT_EQ(ChecksumToHex(Xxh3("", 0)), "2d06800538d394c2");
  uint64_t back = 0;
  ASSERT_TRUE(ChecksumFromHex(ChecksumToHex(whole), &back));
  EXPECT_EQ(back, whole);
  EXPECT_FALSE(ChecksumFromHex("xyz", &back));
}

// The chunked checksum: the same value at once, in parallel and piece by piece with pieces that
// straddle its chunks' boundaries, for sizes around a chunk's; another value for one flipped bit.
TEST(Checksum, ChunkedIsTheSameSeriallyInParallelAndPieceByPiece) {
  ThreadPool pool(3);
  for (size_t n :
       {size_t{0}, size_t{1}, kChecksumChunk - 1, kChecksumChunk, 2 * kChecksumChunk + 12345}) {
    SCOPED_TRACE(n);
    std::vector<unsigned char> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
    const uint64_t serial = ChunkedXxh3(data.data(), n);
    EXPECT_EQ(ChunkedXxh3(data.data(), n, &pool), serial);
    ChunkedXxh3Hasher h;
    for (size_t at = 0, piece = 1; at < n; piece = piece * 3 + 7) {
      const size_t k = std::min(piece % (3 << 20), n - at);
      h.Update(data.data() + at, k);
      at += k;
    }
    EXPECT_EQ(h.Digest(), serial);
    if (n > 0) {
      data[n / 2] ^= 1;
      EXPECT_NE(ChunkedXxh3(data.data(), n, &pool), serial);
    }
  }
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// The destructor runs every task still queued before it joins. The counter outlives the pool and
// is read after it; the workers are held until just before the destructor, so the counting tasks
// are queued when it starts (run or not by then, each must have run once when it returns).
TEST(ThreadPool, DestructionRunsEveryQueuedTask) {
  std::atomic<int> n{0};
  {
    ThreadPool pool(3);
    std::promise<void> go;
    std::shared_future<void> held = go.get_future().share();
    for (int i = 0; i < pool.size(); ++i) pool.Submit([held] { held.wait(); });
    for (int i = 0; i < 50; ++i) pool.Submit([&n] { n++; });
    pool.ParallelFor(1, [&n](size_t) { n++; });  // on this thread: every worker is held
    EXPECT_EQ(n.load(), 1);
    go.set_value();
  }
  EXPECT_EQ(n.load(), 51);
}

TEST(FaultPoint, FlagFiresOnceAtItsReachAndFlagsFromThenOn) {
  ArmFaults("");
  EXPECT_FALSE(FaultFlag("t.flip"));
  ArmFaults("t.flip@3:flag");
  std::vector<bool> got;
  for (int i = 0; i < 6; ++i) got.push_back(FaultFlag("t.flip"));
  EXPECT_EQ(got, (std::vector<bool>{false, false, true, false, false, false}));
  ArmFaults("t.flip@2:flags");
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(FaultFlag("t.flip"));
  EXPECT_EQ(got, (std::vector<bool>{false, true, true, true}));
  FaultPoint("t.flip");  // a flag point never fails the process
  ArmFaults("t.flip:kill");
  EXPECT_FALSE(FaultFlag("t.flip"));  // nor does FaultFlag act on a failing action
  ArmFaults("");
}

// touch=PATH makes the file at its reach and goes on; a wait=PATH on another thread goes on then.
TEST(FaultPoint, TouchMakesTheFileThatAWaitGoesOnWith) {
  const std::string path = testing::TempDir() + "/rtft-touch-" + std::to_string(getpid());
  std::remove(path.c_str());
  ArmFaults(("t.copied@2:touch=" + path + ",t.start:wait=" + path).c_str());
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    FaultPoint("t.start");
    started = true;
  });
  FaultPoint("t.copied");  // the first reach: nothing yet
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_FALSE(started.load());
  FaultPoint("t.copied");
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  waiter.join();
  EXPECT_TRUE(started.load());
  std::remove(path.c_str());
  ArmFaults("");
}

TEST(FaultPoint, RepeatSlowsFromItsReachOnByTheFactorOnAverage) {
  // Unarmed: once.
  ArmFaults("");
  EXPECT_EQ(FaultRepeats("t.compute"), 1);
  // From the third reach on, 1.2 times on average: 1,1,1,1,2 per five reaches.
  ArmFaults("t.compute@3:repeat=1.2");
  EXPECT_EQ(FaultRepeats("t.compute"), 1);
  EXPECT_EQ(FaultRepeats("t.compute"), 1);
  int sum = 0;
  for (int i = 0; i < 50; ++i) sum += FaultRepeats("t.compute");
  EXPECT_EQ(sum, 60);
  EXPECT_EQ(FaultRepeats("other"), 1);
  // Whole factors every time; FaultPoint on a repeat point does nothing (no failure).
  ArmFaults("t.compute:repeat=3");
  FaultPoint("t.compute");  // would end this process with any failing action
  for (int i = 0; i < 4; ++i) EXPECT_EQ(FaultRepeats("t.compute"), 3);
  // A malformed or out-of-range factor: no repeat. A failing action: FaultRepeats never acts.
  for (const char* bad : {"t.compute:repeat=0.5", "t.compute:repeat=x", "t.compute:repeat=1e9"}) {
    ArmFaults(bad);
    EXPECT_EQ(FaultRepeats("t.compute"), 1) << bad;
  }
  ArmFaults("t.compute:kill");
  EXPECT_EQ(FaultRepeats("t.compute"), 1);
  ArmFaults("");
}

}  // namespace
// The straggler detector leaves out the time a step's thread waited for a CPU (docs/protect.md,
// "Stragglers"). Two threads that both want one CPU for the same stretch of wall time: each
// waits for it about half of that, and the kernel's count says so.
TEST(Progress, TheRunDelayCountsTheTimeAThreadWaitedForACpu) {
  if (!ThreadRunDelayNanos()) GTEST_SKIP() << "no /proc/thread-self/schedstat";
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  const auto spin = [&](std::chrono::milliseconds for_wall) {
    EXPECT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // this thread only
    const auto end = std::chrono::steady_clock::now() + for_wall;
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < end) x = x + 1;
  };
  const uint64_t before = ThreadRunDelayNanos().value_or(0);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread other([&] { spin(std::chrono::milliseconds(400)); });
  spin(std::chrono::milliseconds(400));
  other.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double waited = (ThreadRunDelayNanos().value_or(0) - before) / 1e9;
  // About half of the 400 ms; a tenth of the stretch is what the kernel must have counted.
  EXPECT_GT(waited, 0.1 * 0.4) << "waited " << waited << " s of " << wall << " s";
  EXPECT_LT(waited, wall) << "waited " << waited << " s of " << wall << " s";
}

}  // namespace rtft
