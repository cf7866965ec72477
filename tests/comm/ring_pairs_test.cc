// The Gloo backend with only the ring neighbours connected at creation
// (RTFT_COMM_GLOO_PAIRS=ring, docs/comm.md "Which pairs connect") when things go wrong, ranks
// being threads of this process: a pair whose peer never calls, an abort while a pair connects,
// a failed peer's abort passed around the ring, and a pairs setting that cannot work.
#include <thread>

#include "comm/comm_test_util.h"
#include "core/params.h"

namespace rtft::comm::test {
namespace {

using std::chrono::milliseconds;

// With only the ring neighbours connected at creation (RTFT_COMM_GLOO_PAIRS=ring), a pair of
// ranks that are not neighbours connects in its first call, which waits for the peer's.
class RingPairsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RTFT_COMM_GLOO_PAIRS", "ring", 1);
    ReloadParams();
  }
  void TearDown() override {
    unsetenv("RTFT_COMM_GLOO_PAIRS");
    ReloadParams();
  }
};

TEST_F(RingPairsTest, APairWhosePeerNeverCallsEndsAtTheCallsDeadline) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(4, store.get());
  ASSERT_TRUE(comms[0] && comms[2]);
  std::vector<int32_t> data(1000, 7);
  CallOptions call;
  call.timeout = milliseconds(300);
  // Ranks 0 and 2 are not neighbours; rank 2 makes no call.
  const Status s = comms[0]->Send(data.data(), data.size(), DType::kInt32, 2, call);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s;
  EXPECT_EQ(comms[0]->Barrier().code(), StatusCode::kAborted) << "unusable after a timeout";
}

TEST_F(RingPairsTest, AnAbortEndsAPairThatIsConnecting) {
  RTFT_REQUIRE_GLOO();
  for (int round = 0; round < 5; ++round) {
    auto store = NewLocalCommStore();
    auto comms = CreateAll(5, store.get(), 1, "lazy" + std::to_string(round));
    ASSERT_TRUE(comms[1] && comms[3]);
    std::vector<int32_t> data(1000, 7);
    Status got;
    // Rank 1 receives from rank 3, which makes no call; the abort comes at any moment of it.
    std::thread t([&] { got = comms[1]->Recv(data.data(), data.size(), DType::kInt32, 3); });
    comms[1]->Abort();
    t.join();
    EXPECT_EQ(got.code(), StatusCode::kAborted) << got;
  }
}

TEST_F(RingPairsTest, AFailedPeerAbortsItsNeighboursAndTheRingPassesItOn) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  auto comms = CreateAll(6, store.get());
  for (auto& c : comms) ASSERT_TRUE(c);
  // Rank 0 goes away without a goodbye (an abort closes its pairs as a dead process's would):
  // its neighbours see it, abort and close theirs, and so on around the ring.
  comms[0]->Abort();
  for (int r = 1; r < 6; ++r) {
    for (int i = 0; i < 1000 && !comms[r]->aborted(); ++i)
      std::this_thread::sleep_for(milliseconds(10));
    EXPECT_TRUE(comms[r]->aborted()) << "rank " << r;
  }
}

TEST(CommFailureTest, APairsSettingThatCannotWorkIsRefused) {
  RTFT_REQUIRE_GLOO();
  auto store = NewLocalCommStore();
  setenv("RTFT_COMM_GLOO_PAIRS", "star", 1);
  ReloadParams();
  auto c = Communicator::Create(Options(0, 2, store.get()));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  EXPECT_NE(c.status().message().find("RTFT_COMM_GLOO_PAIRS"), std::string::npos);
  // Every pair of 600 ranks: 359,400 addresses through the job's store.
  setenv("RTFT_COMM_GLOO_PAIRS", "all", 1);
  ReloadParams();
  c = Communicator::Create(Options(0, 600, store.get()));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  unsetenv("RTFT_COMM_GLOO_PAIRS");
  ReloadParams();
}

}  // namespace
}  // namespace rtft::comm::test
