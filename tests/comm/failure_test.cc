// The Gloo backend when things go wrong, ranks being threads of this process: Abort() from
// another thread during a call, a peer that goes away, a deadline, ranks that disagree on a
// call, a stale epoch, a peer that never shows up, and aborts racing with calls.
// (ring_pairs_test.cc: the same with only the ring's pairs connected at creation;
// stray_connection_test.cc: a stranger's connection to a rank's port.)
// (tests/comm/comm_job_test.cc does the same with real processes killed by SIGKILL.)
#include <atomic>
#include <thread>

#include "comm/comm_test_util.h"
#include "core/params.h"

namespace rtft::comm::test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

constexpr size_t kBig = 16 << 20;  // elements: a call that is long enough to be in flight

TEST(CommFailureTest, AbortEndsACallInFlightNotItsDeadline) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(3, store.get());
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  // Ranks 0 and 1 start an all-reduce that rank 2 never joins; they wait until aborted.
  std::vector<Status> got(2);
  std::vector<double> after_abort(2);
  std::atomic<int> entering{0};
  Clock::time_point aborted_at;
  std::vector<float> in(kBig, 1.0f), out0(kBig), out1(kBig);
  std::thread t0([&] {
    ++entering;
    got[0] = comms[0]->AllReduce(in.data(), out0.data(), kBig, DType::kFloat32, ReduceOp::kSum);
    after_abort[0] = MsSince(aborted_at);
  });
  std::thread t1([&] {
    ++entering;
    got[1] = comms[1]->AllReduce(in.data(), out1.data(), kBig, DType::kFloat32, ReduceOp::kSum);
    after_abort[1] = MsSince(aborted_at);
  });
  while (entering < 2) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(50));  // let them block; correctness does not need it
  aborted_at = Clock::now();
  comms[0]->Abort();
  comms[1]->Abort();
  comms[1]->Abort();  // idempotent
  t0.join();
  t1.join();
  for (int r = 0; r < 2; ++r) {
    // Ended by the abort: without it the call would wait for rank 2 until its deadline
    // (RTFT_COMM_TIMEOUT_MS, 300 s) and say kDeadlineExceeded. How soon is a figure, not a bound
    // (a loaded machine schedules the waiting thread when it can).
    EXPECT_EQ(got[r].code(), StatusCode::kAborted) << got[r];
    RecordProperty("rank" + std::to_string(r) + "_after_abort_ms", std::to_string(after_abort[r]));
  }
  // Every later call fails at once with kAborted, and Wait says the same.
  EXPECT_EQ(comms[0]->Barrier().code(), StatusCode::kAborted);
  EXPECT_EQ(comms[1]->Wait().code(), StatusCode::kAborted);
  EXPECT_TRUE(comms[0]->aborted());
  // Rank 2 learns too: an aborted communicator closes its connections.
  for (int i = 0; i < 500 && !comms[2]->aborted(); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(comms[2]->aborted());
}

TEST(CommFailureTest, ThePeersOfARankThatGoesAwayGetAbortedNotAHang) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(3, store.get());
  std::vector<Status> got(2);
  std::vector<double> after(2);
  std::atomic<int> entering{0};
  Clock::time_point gone_at;
  std::vector<float> in(kBig, 2.0f), out0(kBig), out1(kBig);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ++entering;
      got[r] = comms[r]->AllReduce(in.data(), r == 0 ? out0.data() : out1.data(), kBig,
                                   DType::kFloat32, ReduceOp::kSum);
      after[r] = MsSince(gone_at);
    });
  }
  while (entering < 2) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(50));
  // Rank 2 "dies": an aborted communicator closes its connections without a goodbye, as the
  // kernel does for a killed process.
  gone_at = Clock::now();
  comms[2]->Abort();
  comms[2].reset();
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), StatusCode::kAborted) << got[r];
    EXPECT_LT(after[r], 200.0) << "rank " << r;
  }
}

TEST(CommFailureTest, AFailureEventAbortsThroughTheRegistry) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  EpochAbortRegistry registry(1);
  std::vector<std::unique_ptr<Communicator>> comms(2);
  RunRanks(2, [&](int r) {
    CommOptions o = Options(r, 2, store.get(), 1);
    o.aborts = &registry;
    auto c = Communicator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    comms[r] = std::move(*c);
  });
  std::atomic<bool> entered{false};
  Status got;
  std::vector<float> in(kBig), out(kBig);
  std::thread t([&] {
    entered = true;
    // Rank 1 never joins.
    got = comms[0]->AllReduce(in.data(), out.data(), kBig, DType::kFloat32, ReduceOp::kSum);
  });
  while (!entered) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(20));
  const auto t0 = Clock::now();
  registry.Advance(2);
  t.join();
  // Ended by the event (not at the 300 s deadline, which says kDeadlineExceeded).
  EXPECT_EQ(got.code(), StatusCode::kAborted) << got;
  RecordProperty("after_event_ms", std::to_string(MsSince(t0)));
  EXPECT_TRUE(comms[1]->aborted()) << "every communicator of the old epoch is aborted";
  // A communicator of the stale epoch cannot be created any more.
  CommOptions o = Options(0, 2, store.get(), 1, "late");
  o.aborts = &registry;
  auto late = Communicator::Create(o);
  EXPECT_EQ(late.status().code(), StatusCode::kAborted) << late.status();
  // Destroying aborted communicators is safe and quick.
  comms.clear();
}

TEST(CommFailureTest, ADeadlineEndsTheCallAndTheCommunicator) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(2, store.get());
  std::vector<float> in(1000), out(1000);
  CallOptions call;
  call.timeout = milliseconds(300);
  const auto t0 = Clock::now();
  // Rank 1 never joins: rank 0 waits until its deadline.
  const Status s =
      comms[0]->AllReduce(in.data(), out.data(), 1000, DType::kFloat32, ReduceOp::kSum, call);
  const double took = MsSince(t0);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(took, 299.0);
  EXPECT_LT(took, 3000.0);
  EXPECT_EQ(
      comms[0]->AllReduce(in.data(), out.data(), 1000, DType::kFloat32, ReduceOp::kSum).code(),
      StatusCode::kAborted)
      << "unusable after a timeout";
}

TEST(CommFailureTest, RanksThatDisagreeGetAClearErrorNotAHang) {
  RTFT_REQUIRE_GLOO();
  struct Case {
    const char* what;
    std::function<Status(Communicator&, int)> call;
  };
  std::vector<float> a(100000, 1.0f), b(100000);
  const std::vector<Case> cases = {
      {"count",
       [&](Communicator& c, int r) {
         return c.AllReduce(a.data(), b.data(), r == 1 ? 50000 : 100000, DType::kFloat32,
                            ReduceOp::kSum);
       }},
      {"dtype",
       [&](Communicator& c, int r) {
         return c.AllReduce(a.data(), b.data(), 1000, r == 2 ? DType::kInt32 : DType::kFloat32,
                            ReduceOp::kSum);
       }},
      {"operation",
       [&](Communicator& c, int r) {
         return r == 0 ? c.Broadcast(b.data(), 1000, DType::kFloat32, 0)
                       : c.AllReduce(a.data(), b.data(), 1000, DType::kFloat32, ReduceOp::kSum);
       }},
      {"root", [&](Communicator& c,
                   int r) { return c.Broadcast(b.data(), 1000, DType::kFloat32, r == 2 ? 1 : 0); }},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    auto store = NewLocalCommStore();
    auto comms = CreateAll(3, store.get(), 1, "disagree" + std::to_string(k));
    std::vector<Status> got(3);
    const auto t0 = Clock::now();
    RunRanks(3, [&](int r) { got[r] = cases[k].call(*comms[r], r); });
    EXPECT_LT(MsSince(t0), 5000.0) << cases[k].what << ": no rank may wait for its deadline";
    // A rank whose part of the call was consistent may finish it; the others fail.
    int clear = 0;
    for (int r = 0; r < 3; ++r) {
      if (got[r].ok()) continue;
      if (got[r].code() == StatusCode::kInvalidArgument) {
        ++clear;
        EXPECT_NE(got[r].message().find("disagree"), std::string::npos) << got[r];
      } else {
        EXPECT_EQ(got[r].code(), StatusCode::kAborted) << got[r];
      }
    }
    EXPECT_GE(clear, 1) << cases[k].what << ": some rank must say what is wrong";
  }
}

TEST(CommFailureTest, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(2, store.get());
  float x = 0;
  EXPECT_EQ(comms[0]->AllReduce(nullptr, &x, 4, DType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Broadcast(&x, 1, DType::kFloat32, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Send(&x, 1, DType::kFloat32, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->AllGatherV(&x, &x, {1}, DType::kFloat32).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->AllReduce(&x, &x, SIZE_MAX / 2, DType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  // The communicator is still good.
  RunRanks(2, [&](int r) { EXPECT_TRUE(comms[r]->Barrier().ok()); });
  EXPECT_EQ(Communicator::Create(Options(0, 2, nullptr)).status().code(),
            StatusCode::kInvalidArgument);
  CommOptions bad = Options(0, 2, store.get(), 1, "a name with spaces");
  EXPECT_EQ(Communicator::Create(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Options(2, 2, store.get());
  EXPECT_EQ(Communicator::Create(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(CommFailureTest, APeerThatNeverShowsUpEndsCreationAtItsDeadline) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  CommOptions o = Options(0, 2, store.get(), 1, "alone");
  o.create_timeout = milliseconds(400);
  const auto t0 = Clock::now();
  auto c = Communicator::Create(o);
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_GE(MsSince(t0), 399.0);
  EXPECT_LT(MsSince(t0), 3000.0);
}

TEST(CommFailureTest, AnEarlierEpochsKeysAreNeverRead) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  { auto comms = CreateAll(2, store.get(), /*epoch=*/1, "train"); }
  // Epoch 2 of the same name: rank 1 is not there, so rank 0 must not meet epoch 1's rank 1.
  CommOptions o = Options(0, 2, store.get(), 2, "train");
  o.create_timeout = milliseconds(300);
  EXPECT_EQ(Communicator::Create(o).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(CommFailureTest, AbortDuringCreationEndsItAtOnce) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  EpochAbortRegistry registry(1);
  CommOptions o = Options(0, 2, store.get(), 1, "creating");
  o.aborts = &registry;
  StatusOr<std::unique_ptr<Communicator>> c = Status::Internal("not run");
  std::thread t([&] { c = Communicator::Create(o); });
  std::this_thread::sleep_for(milliseconds(50));
  const auto t0 = Clock::now();
  registry.Advance(2);
  t.join();
  EXPECT_EQ(c.status().code(), StatusCode::kAborted) << c.status();
  EXPECT_LT(MsSince(t0), 500.0);
}

TEST(CommFailureTest, AbortRacingWithCallsNeverCrashesOrHangs) {
  RTFT_REQUIRE_GLOO();
  for (int round = 0; round < 20; ++round) {
    auto store = NewLocalCommStore();
    auto comms = CreateAll(2, store.get(), 1, "race" + std::to_string(round));
    std::vector<int> ok(2), aborted(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> in(4096, 1.0f), out(4096);
        for (int i = 0; i < 1000; ++i) {
          const Status s = comms[r]->AllReduce(in.data(), out.data(), in.size(), DType::kFloat32,
                                               ReduceOp::kSum);
          if (s.ok()) {
            ++ok[r];
          } else {
            EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
            ++aborted[r];
            break;
          }
        }
      });
    }
    // Abort rank `round % 2` after a varying number of its calls, from this thread and another.
    while (ok[round % 2] < round * 3 && aborted[round % 2] == 0) std::this_thread::yield();
    std::thread other([&] { comms[round % 2]->Abort(); });
    comms[round % 2]->Abort();
    other.join();
    for (auto& t : threads) t.join();
    EXPECT_EQ(aborted[round % 2], 1);
    EXPECT_EQ(aborted[1 - round % 2], 1) << "the peer of an aborted rank must not hang";
  }
}

}  // namespace
}  // namespace rtft::comm::test
