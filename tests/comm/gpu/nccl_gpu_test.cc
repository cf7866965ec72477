// The NCCL backend on the GPUs of this machine, ranks being threads (one per GPU): every
// collective on device memory against the reference of comm_test_util.h, the same bytes on every
// rank and every run, Wait and its deadline, Abort() from another thread while a rank waits for a
// peer that never comes, calls after an abort, and the next epoch's communicator. With one GPU the
// communicators have one rank; with none (or a build without NCCL) the tests skip.
#include <atomic>
#include <cstring>
#include <thread>

#include "comm/comm_test_util.h"
#include "core/build_config.h"

#if RTFT_WITH_NCCL
#include <cuda_runtime_api.h>
#endif

namespace rtft::comm::test {
namespace {

#if RTFT_WITH_NCCL

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

int Gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define RTFT_REQUIRE_GPU()                            \
  do {                                                \
    if (Gpus() < 1) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

struct Device {
  void* p = nullptr;
  Device(int dev, size_t bytes) {
    cudaSetDevice(dev);
    EXPECT_EQ(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  void From(const std::vector<char>& h) {
    cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice);
  }
  std::vector<char> To(size_t bytes) const {
    std::vector<char> h(bytes);
    cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
};

CommOptions NcclOptions(int rank, int n, CommStore* store, uint64_t epoch = 1) {
  CommOptions o = Options(rank, n, store, epoch, "nccl");
  o.backend = CommBackend::kNccl;
  o.device = rank;
  return o;
}

std::vector<std::unique_ptr<Communicator>> CreateNccl(int n, CommStore* store, uint64_t epoch) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  RunRanks(n, [&](int r) {
    cudaSetDevice(r);
    auto c = Communicator::Create(NcclOptions(r, n, store, epoch));
    ASSERT_TRUE(c.ok()) << c.status();
    comms[r] = std::move(*c);
  });
  return comms;
}

TEST(NcclGpuTest, CollectivesOnDeviceMemoryMatchTheReference) {
  RTFT_REQUIRE_GPU();
  const int n = std::min(Gpus(), 4);
  auto store = NewLocalCommStore();
  auto comms = CreateNccl(n, store.get(), 1);
  ASSERT_EQ(comms[0]->memory(), MemoryKind::kDevice);
  for (DType d :
       {DType::kFloat32, DType::kBFloat16, DType::kInt32, DType::kUInt8, DType::kFloat64}) {
    const size_t count = 1 << 20, es = DTypeSize(d);
    std::vector<std::vector<char>> in(n);
    for (int r = 0; r < n; ++r) in[r] = Input(r, count, d);
    std::vector<std::vector<char>> got(n);
    RunRanks(n, [&](int r) {
      Device s(r, count * es), o(r, count * es);
      s.From(in[r]);
      ASSERT_TRUE(comms[r]->AllReduce(s.p, o.p, count, d, ReduceOp::kMax).ok());
      ASSERT_TRUE(comms[r]->Wait(nullptr, milliseconds(30000)).ok());
      got[r] = o.To(count * es);
    });
    const std::vector<char> want = ReferenceAllReduce(in, count, d, ReduceOp::kMax);
    for (int r = 0; r < n; ++r) EXPECT_TRUE(got[r] == want) << DTypeName(d) << " rank " << r;
    if (n == 1) EXPECT_TRUE(got[0] == in[0]);
  }
  // All-gather-v and reduce-scatter-v (NCCL groups), broadcast and barrier.
  std::vector<size_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = 1000 + 77 * r;
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<std::vector<char>> in(n);
  for (int r = 0; r < n; ++r) in[r] = Input(r, total, DType::kInt32);
  RunRanks(n, [&](int r) {
    size_t start = 0;
    for (int k = 0; k < r; ++k) start += counts[k];
    Device s(r, total * 4), mine(r, counts[r] * 4), all(r, total * 4);
    s.From(in[r]);
    ASSERT_TRUE(comms[r]->ReduceScatterV(s.p, mine.p, counts, DType::kInt32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comms[r]->AllGatherV(mine.p, all.p, counts, DType::kInt32).ok());
    ASSERT_TRUE(comms[r]->Barrier().ok());
    std::vector<char> sum(total * 4);
    for (size_t i = 0; i < total; ++i) {
      int64_t acc = 0;
      for (int k = 0; k < n; ++k) acc += reinterpret_cast<const int32_t*>(in[k].data())[i];
      reinterpret_cast<int32_t*>(sum.data())[i] = static_cast<int32_t>(acc);
    }
    EXPECT_TRUE(all.To(total * 4) == sum) << "rank " << r;
    std::vector<char> b = Input(99, 5000, DType::kFloat32);
    Device buf(r, b.size());
    if (r == n - 1) buf.From(b);
    ASSERT_TRUE(comms[r]->Broadcast(buf.p, 5000, DType::kFloat32, n - 1).ok());
    ASSERT_TRUE(comms[r]->Wait(nullptr, milliseconds(30000)).ok());
    EXPECT_TRUE(buf.To(b.size()) == b);
  });
}

// ncclFloat64: sum, min, max and (with a power-of-two number of ranks) avg of doubles, exact
// whatever order NCCL adds in: every term is a multiple of 2^-20 below 2^9 in magnitude, so any
// partial sum of up to four of them needs at most 31 significant bits and is a double without
// rounding, as is its quotient by a power of two. The expected values are computed here; a
// float32 detour (24 bits) would lose the low bits.
TEST(NcclGpuTest, Float64ReductionsAreExact) {
  RTFT_REQUIRE_GPU();
  const int n = std::min(Gpus(), 4);
  auto store = NewLocalCommStore();
  auto comms = CreateNccl(n, store.get(), 1);
  const size_t count = (1 << 20) + 3;
  std::vector<std::vector<double>> in(n, std::vector<double>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      in[r][i] = std::ldexp(static_cast<double>((i * 2654435761u + r * 40503u) % (1u << 29)) -
                                static_cast<double>(1u << 28),
                            -20) +
                 0x1p-20 * r;
  const bool exact_avg = (n & (n - 1)) == 0;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    if (op == ReduceOp::kAvg && !exact_avg) continue;
    std::vector<double> want(count);
    for (size_t i = 0; i < count; ++i) {
      double acc = in[0][i];
      for (int r = 1; r < n; ++r) acc = Op(op, acc, in[r][i]);
      want[i] = op == ReduceOp::kAvg ? acc / n : acc;
    }
    std::vector<std::vector<char>> got(n);
    RunRanks(n, [&](int r) {
      Device s(r, count * 8), o(r, count * 8);
      s.From(std::vector<char>(reinterpret_cast<const char*>(in[r].data()),
                               reinterpret_cast<const char*>(in[r].data() + count)));
      ASSERT_TRUE(comms[r]->AllReduce(s.p, o.p, count, DType::kFloat64, op).ok());
      ASSERT_TRUE(comms[r]->Wait(nullptr, milliseconds(30000)).ok());
      got[r] = o.To(count * 8);
    });
    for (int r = 0; r < n; ++r) {
      const double* g = reinterpret_cast<const double*>(got[r].data());
      size_t first = 0, wrong = 0;
      for (size_t i = 0; i < count; ++i)
        if (std::memcmp(&g[i], &want[i], 8) != 0 && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0u) << ReduceOpName(op) << " rank " << r << " of " << n << ": first at "
                           << first << " of " << count << ", " << g[first] << " for " << want[first]
                           << " (input " << in[0][first] << ")";
    }
  }
}

TEST(NcclGpuTest, SumsAreTheSameBytesOnEveryRankAndEveryRun) {
  RTFT_REQUIRE_GPU();
  const int n = std::min(Gpus(), 4);
  const size_t count = 3 << 20;
  std::vector<std::vector<char>> in(n);
  for (int r = 0; r < n; ++r) in[r] = Input(r, count, DType::kFloat32);
  std::vector<std::vector<char>> first;
  for (int run = 0; run < 2; ++run) {
    auto store = NewLocalCommStore();
    auto comms = CreateNccl(n, store.get(), 10 + run);
    std::vector<std::vector<char>> got(n);
    RunRanks(n, [&](int r) {
      Device s(r, count * 4), o(r, count * 4);
      s.From(in[r]);
      ASSERT_TRUE(comms[r]->AllReduce(s.p, o.p, count, DType::kFloat32, ReduceOp::kSum).ok());
      ASSERT_TRUE(comms[r]->Wait(nullptr, milliseconds(30000)).ok());
      got[r] = o.To(count * 4);
    });
    for (int r = 1; r < n; ++r) EXPECT_TRUE(got[r] == got[0]) << "rank " << r;
    if (run == 0)
      first = got;
    else
      EXPECT_TRUE(got[0] == first[0]) << "the second run differs";
  }
}

TEST(NcclGpuTest, AbortIsQuickAndFinal) {
  RTFT_REQUIRE_GPU();
  auto store = NewLocalCommStore();
  auto comms = CreateNccl(1, store.get(), 1);
  Device s(0, 4096), o(0, 4096);
  ASSERT_TRUE(comms[0]->AllReduce(s.p, o.p, 1024, DType::kFloat32, ReduceOp::kSum).ok());
  const auto t0 = Clock::now();
  comms[0]->Abort();
  comms[0]->Abort();
  const double abort_call_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(abort_call_ms, 50.0) << "Abort() must not wait for ncclCommAbort";
  EXPECT_EQ(comms[0]->AllReduce(s.p, o.p, 1024, DType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kAborted);
  EXPECT_EQ(comms[0]->Wait(nullptr, milliseconds(1000)).code(), StatusCode::kAborted);
  comms.clear();  // waits for the abort thread
  // The next epoch's communicator works.
  auto next = CreateNccl(1, store.get(), 2);
  ASSERT_TRUE(next[0]->AllReduce(s.p, o.p, 1024, DType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_TRUE(next[0]->Wait(nullptr, milliseconds(30000)).ok());
}

TEST(NcclGpuTest, AbortEndsAWaitForAPeerThatNeverComes) {
  if (Gpus() < 2) GTEST_SKIP() << "needs two GPUs";
  auto store = NewLocalCommStore();
  auto comms = CreateNccl(2, store.get(), 1);
  // One all-reduce together first: NCCL connects its ranks at their first collective.
  RunRanks(2, [&](int r) {
    Device a(r, 4096), b(r, 4096);
    ASSERT_TRUE(comms[r]->AllReduce(a.p, b.p, 1024, DType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comms[r]->Wait(nullptr, milliseconds(30000)).ok());
  });
  Device s(0, 1 << 24), o(0, 1 << 24);
  cudaSetDevice(0);
  ASSERT_TRUE(comms[0]->AllReduce(s.p, o.p, 1 << 22, DType::kFloat32, ReduceOp::kSum).ok());
  std::atomic<bool> waiting{false};
  Status got;
  Clock::time_point returned;
  std::thread t([&] {
    cudaSetDevice(0);
    waiting = true;
    got = comms[0]->Wait(nullptr, milliseconds(60000));  // rank 1 never joins
    returned = Clock::now();
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(100));
  const auto aborted = Clock::now();
  comms[0]->Abort();
  t.join();
  EXPECT_EQ(got.code(), StatusCode::kAborted) << got;
  const double gap_ms = std::chrono::duration<double, std::milli>(returned - aborted).count();
  EXPECT_LT(gap_ms, 100.0);
  comms.clear();
}

TEST(NcclGpuTest, ACreationWithoutItsPeersEndsAtTheDeadline) {
  if (Gpus() < 1) GTEST_SKIP() << "no CUDA device";
  auto store = NewLocalCommStore();
  CommOptions o = NcclOptions(1, 2, store.get(), 1);  // rank 0 never publishes the id
  o.device = 0;
  o.create_timeout = milliseconds(500);
  auto c = Communicator::Create(o);
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status();
}

#else

TEST(NcclGpuTest, Skipped) { GTEST_SKIP() << "this build has no NCCL backend"; }

#endif

}  // namespace
}  // namespace rtft::comm::test
