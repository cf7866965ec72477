// Every collective of the Gloo backend against a reference computed here, for every data type,
// odd sizes (several segments each, with a small RTFT_COMM_SEGMENT_BYTES) and 1 to 5 ranks, ranks
// being threads of this process. Also: results are the same bytes on every rank and every run.
#include <cstdlib>
#include <numeric>
#include <tuple>

#include "comm/comm_test_util.h"
#include "core/params.h"
#include "core/progress.h"

namespace rtft::comm::test {
namespace {

const DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                        DType::kInt32,   DType::kInt64,   DType::kUInt8,    DType::kFloat64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
const size_t kCounts[] = {0, 1, 7, 1001, 9999};

// Ranks, and which pairs connect when a communicator is made (RTFT_COMM_GLOO_PAIRS).
class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {
 protected:
  void SetUp() override {
    // 4 KiB segments: the larger counts cross many segments and block boundaries.
    setenv("RTFT_COMM_SEGMENT_BYTES", "4K", 1);
    setenv("RTFT_COMM_GLOO_PAIRS", std::get<1>(GetParam()), 1);
    ReloadParams();
    store_ = NewLocalCommStore();
  }
  void TearDown() override {
    unsetenv("RTFT_COMM_GLOO_PAIRS");
    ReloadParams();
  }
  int n() const { return std::get<0>(GetParam()); }
  std::unique_ptr<CommStore> store_;
};

TEST_P(CollectivesTest, AllReduceMatchesTheRingOrderReference) {
  RTFT_REQUIRE_GLOO();
  auto comms = CreateAll(n(), store_.get());
  ASSERT_EQ(comms.size(), static_cast<size_t>(n()));
  for (DType d : kTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : kCounts) {
        std::vector<std::vector<char>> in(n()), out(n());
        for (int r = 0; r < n(); ++r) in[r] = Input(r, count, d);
        const std::vector<char> want = ReferenceAllReduce(in, count, d, op);
        RunRanks(n(), [&](int r) {
          out[r].assign(in[r].size(), 0);
          // Odd ranks reduce in place.
          if (r % 2 == 1) {
            out[r] = in[r];
            EXPECT_TRUE(comms[r]->AllReduce(out[r].data(), out[r].data(), count, d, op).ok());
          } else {
            EXPECT_TRUE(comms[r]->AllReduce(in[r].data(), out[r].data(), count, d, op).ok());
          }
        });
        for (int r = 0; r < n(); ++r)
          ASSERT_TRUE(out[r] == want) << DTypeName(d) << " " << ReduceOpName(op) << " count "
                                      << count << " rank " << r << " of " << n();
      }
    }
  }
}

// float64 sums, averages, maxima and minima are the bits of the ring order docs/comm.md gives,
// computed here one element at a time: not merely close, and not the bits of another order (with
// three ranks or more, the inputs make the rank-order sum differ from the ring-order one).
TEST_P(CollectivesTest, Float64AllReduceIsBitExactInTheRingOrder) {
  RTFT_REQUIRE_GLOO();
  auto comms = CreateAll(n(), store_.get());
  const size_t count = 9999;  // 80 KiB: twenty 4 KiB segments, blocks ending mid-segment
  std::vector<std::vector<char>> in(n());
  for (int r = 0; r < n(); ++r) in[r] = Input(r, count, DType::kFloat64);
  size_t other_order = 0;
  for (ReduceOp op : kOps) {
    const std::vector<char> want = ReferenceAllReduce(in, count, DType::kFloat64, op);
    std::vector<std::vector<char>> out(n(), std::vector<char>(count * 8));
    RunRanks(n(), [&](int r) {
      EXPECT_TRUE(
          comms[r]->AllReduce(in[r].data(), out[r].data(), count, DType::kFloat64, op).ok());
    });
    for (int r = 0; r < n(); ++r)
      ASSERT_TRUE(out[r] == want) << ReduceOpName(op) << " rank " << r << " of " << n();
    if (op != ReduceOp::kSum) continue;
    const double* got = reinterpret_cast<const double*>(out[0].data());
    for (size_t i = 0; i < count; ++i) {
      double naive = 0;
      for (int r = 0; r < n(); ++r) naive += reinterpret_cast<const double*>(in[r].data())[i];
      if (std::memcmp(&naive, &got[i], 8) != 0) ++other_order;
    }
  }
  if (n() >= 3) EXPECT_GT(other_order, count / 100) << "the inputs do not tell the orders apart";
  if (n() <= 2) EXPECT_EQ(other_order, 0u);  // a + b == b + a, and 0 + a == a
}

TEST_P(CollectivesTest, ReduceScatterVGivesEachRankItsReducedSlice) {
  RTFT_REQUIRE_GLOO();
  auto comms = CreateAll(n(), store_.get());
  for (DType d : kTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      // Uneven, with an empty shard where there are several ranks.
      std::vector<size_t> counts(n());
      for (int r = 0; r < n(); ++r) counts[r] = r == 1 ? 0 : 1500 + 333 * r;
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      std::vector<std::vector<char>> in(n()), out(n());
      for (int r = 0; r < n(); ++r) in[r] = Input(r, total, d);
      RunRanks(n(), [&](int r) {
        out[r].assign(counts[r] * DTypeSize(d), 0);
        EXPECT_TRUE(comms[r]->ReduceScatterV(in[r].data(), out[r].data(), counts, d, op).ok());
      });
      size_t start = 0;
      for (int r = 0; r < n(); ++r) {
        std::vector<char> want(counts[r] * DTypeSize(d));
        for (size_t i = 0; i < counts[r]; ++i)
          ReduceElement(in, d, op, r, start + i, want.data(), i);
        ASSERT_TRUE(out[r] == want) << DTypeName(d) << " " << ReduceOpName(op) << " rank " << r;
        start += counts[r];
      }
      // The even variant.
      const size_t each = 777;
      for (int r = 0; r < n(); ++r) in[r] = Input(r + 7, each * n(), d);
      RunRanks(n(), [&](int r) {
        out[r].assign(each * DTypeSize(d), 0);
        EXPECT_TRUE(comms[r]->ReduceScatter(in[r].data(), out[r].data(), each, d, op).ok());
      });
      for (int r = 0; r < n(); ++r) {
        std::vector<char> want(each * DTypeSize(d));
        for (size_t i = 0; i < each; ++i) ReduceElement(in, d, op, r, r * each + i, want.data(), i);
        ASSERT_TRUE(out[r] == want) << "reduce-scatter " << DTypeName(d) << " rank " << r;
      }
    }
  }
}

TEST_P(CollectivesTest, AllGatherVBroadcastSendRecvAndBarrier) {
  RTFT_REQUIRE_GLOO();
  auto comms = CreateAll(n(), store_.get());
  for (DType d : kTypes) {
    const size_t es = DTypeSize(d);
    std::vector<size_t> counts(n());
    for (int r = 0; r < n(); ++r) counts[r] = r == 0 ? 0 : 2000 + 17 * r;
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<std::vector<char>> in(n()), out(n());
    std::vector<char> want;
    for (int r = 0; r < n(); ++r) {
      in[r] = Input(r, counts[r], d);
      want.insert(want.end(), in[r].begin(), in[r].end());
    }
    RunRanks(n(), [&](int r) {
      out[r].assign(total * es, 0);
      EXPECT_TRUE(comms[r]->AllGatherV(in[r].data(), out[r].data(), counts, d).ok());
    });
    for (int r = 0; r < n(); ++r) ASSERT_TRUE(out[r] == want) << "all-gather-v rank " << r;

    const size_t each = 1234;
    want.clear();
    for (int r = 0; r < n(); ++r) {
      in[r] = Input(r + 3, each, d);
      want.insert(want.end(), in[r].begin(), in[r].end());
    }
    RunRanks(n(), [&](int r) {
      out[r].assign(each * n() * es, 0);
      // In place: this rank's slice already sits in the output.
      std::memcpy(out[r].data() + r * each * es, in[r].data(), each * es);
      EXPECT_TRUE(comms[r]->AllGather(out[r].data() + r * each * es, out[r].data(), each, d).ok());
    });
    for (int r = 0; r < n(); ++r) ASSERT_TRUE(out[r] == want) << "all-gather rank " << r;

    for (int root = 0; root < n(); ++root) {
      const std::vector<char> data = Input(root + 11, 4099, d);
      RunRanks(n(), [&](int r) {
        out[r] = r == root ? data : std::vector<char>(data.size(), 0);
        EXPECT_TRUE(comms[r]->Broadcast(out[r].data(), 4099, d, root).ok());
      });
      for (int r = 0; r < n(); ++r) ASSERT_TRUE(out[r] == data) << "broadcast root " << root;
    }
  }
  if (n() > 1) {
    // A ring of point-to-point messages: rank r sends to r + 1 and receives from r - 1.
    std::vector<std::vector<char>> got(n());
    RunRanks(n(), [&](int r) {
      const std::vector<char> mine = Input(r, 5000, DType::kInt32);
      got[r].assign(mine.size(), 0);
      // A send completes when its receiver takes it: even ranks send first, odd ranks receive
      // first, so the ring never waits on itself.
      const int to = (r + 1) % n(), from = (r + n() - 1) % n();
      if (r % 2 == 0) {
        EXPECT_TRUE(comms[r]->Send(mine.data(), 5000, DType::kInt32, to).ok());
        EXPECT_TRUE(comms[r]->Recv(got[r].data(), 5000, DType::kInt32, from).ok());
      } else {
        EXPECT_TRUE(comms[r]->Recv(got[r].data(), 5000, DType::kInt32, from).ok());
        EXPECT_TRUE(comms[r]->Send(mine.data(), 5000, DType::kInt32, to).ok());
      }
    });
    for (int r = 0; r < n(); ++r)
      ASSERT_TRUE(got[r] == Input((r + n() - 1) % n(), 5000, DType::kInt32));
  }
  RunRanks(n(), [&](int r) {
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(comms[r]->Barrier().ok());
  });
}

TEST_P(CollectivesTest, ResultsAreBitwiseIdenticalOnEveryRankAndEveryRun) {
  RTFT_REQUIRE_GLOO();
  const size_t count = 20000;
  std::vector<std::vector<char>> in(n());
  for (int r = 0; r < n(); ++r) in[r] = Input(r, count, DType::kFloat32);
  std::vector<std::vector<char>> first;
  for (int run = 0; run < 2; ++run) {
    // A fresh communicator each run, as after a failure.
    auto comms = CreateAll(n(), store_.get(), /*epoch=*/10 + run);
    std::vector<std::vector<char>> out(n(), std::vector<char>(count * 4));
    RunRanks(n(), [&](int r) {
      EXPECT_TRUE(
          comms[r]
              ->AllReduce(in[r].data(), out[r].data(), count, DType::kFloat32, ReduceOp::kSum)
              .ok());
    });
    for (int r = 1; r < n(); ++r) ASSERT_TRUE(out[r] == out[0]) << "rank " << r << " differs";
    if (run == 0) {
      first = out;
    } else {
      ASSERT_TRUE(out[0] == first[0]) << "the second run differs from the first";
    }
  }
}

// Every pair of ranks exchanges messages, one pair after the other in one order of all ranks
// (rank i sends to rank j, then j to i), with both directions of a pair in one call each: with
// only the ring neighbours connected at creation, every other pair connects in its first call.
TEST_P(CollectivesTest, EveryPairExchangesMessagesInOneOrderOfAllRanks) {
  RTFT_REQUIRE_GLOO();
  if (n() < 2) GTEST_SKIP() << "no pairs";
  auto comms = CreateAll(n(), store_.get());
  const size_t count = 3001;  // crosses segments of 4 KiB
  auto payload = [&](int from, int to) { return Input(from * 31 + to, count, DType::kInt32); };
  std::vector<int> wrong(n(), 0);
  RunRanks(n(), [&](int r) {
    std::vector<char> got(count * 4);
    for (int i = 0; i < n(); ++i) {
      for (int j = 0; j < n(); ++j) {
        if (i == j || (r != i && r != j)) continue;
        const int peer = r == i ? j : i;
        const std::vector<char> mine = payload(r, peer);
        if (r == i) {
          EXPECT_TRUE(comms[r]->Send(mine.data(), count, DType::kInt32, peer).ok());
        } else {
          EXPECT_TRUE(comms[r]->Recv(got.data(), count, DType::kInt32, peer).ok());
          if (got != payload(peer, r)) ++wrong[r];
        }
      }
    }
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(wrong[r], 0) << "rank " << r;
  // The collectives still work over the pairs connected late.
  std::vector<std::vector<char>> out(n(), std::vector<char>(count * 4));
  RunRanks(n(), [&](int r) {
    const std::vector<char> in = Input(r, count, DType::kInt32);
    EXPECT_TRUE(
        comms[r]->AllReduce(in.data(), out[r].data(), count, DType::kInt32, ReduceOp::kSum).ok());
  });
  for (int r = 1; r < n(); ++r) EXPECT_TRUE(out[r] == out[0]);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values("all", "ring")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  std::get<1>(info.param);
                         });
// Eight ranks with the ring's pairs alone: the barrier's partners at distance 2 and 4 are not
// neighbours, and most pairs of the exchange connect late.
INSTANTIATE_TEST_SUITE_P(Wide, CollectivesTest, ::testing::Values(std::make_tuple(8, "ring")),
                         [](const auto& info) { return std::string("8ranks_ring"); });

// CommOptions::job_ranks makes a communicator's calls count for the hang detector (the process's
// ProgressMonitor), as the step's; without them it is the application's own and never counts.
// Job ranks that do not name every member are refused.
TEST(CommWatchTest, JobRanksMakeACommunicatorsCallsCountAsTheSteps) {
  RTFT_REQUIRE_GLOO();
  const auto call = [](bool watched, const std::string& name) {
    auto store = NewLocalCommStore();
    std::vector<Status> got(2);
    RunRanks(2, [&](int r) {
      CommOptions o = Options(r, 2, store.get(), 1, name);
      if (watched) o.job_ranks = {4, 6};
      auto c = Communicator::Create(o);
      if (!c.ok()) {
        got[r] = c.status();
        return;
      }
      std::vector<float> in(1 << 16, 1.0f), out(in.size());
      got[r] = (*c)->AllReduce(in.data(), out.data(), in.size(), DType::kFloat32, ReduceOp::kSum);
    });
    for (const Status& s : got) EXPECT_TRUE(s.ok()) << s;
  };
  const uint64_t before = ProgressMonitor::Get().InCallNanos();
  call(false, "own");
  EXPECT_EQ(ProgressMonitor::Get().InCallNanos(), before);
  call(true, "watched");
  EXPECT_GT(ProgressMonitor::Get().InCallNanos(), before);
  for (const std::vector<int>& bad : {std::vector<int>{4}, std::vector<int>{4, -1}}) {
    auto store = NewLocalCommStore();
    CommOptions o = Options(0, 2, store.get(), 1, "bad");
    o.job_ranks = bad;
    const auto c = Communicator::Create(o);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  }
}

}  // namespace
}  // namespace rtft::comm::test
