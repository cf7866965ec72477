// The Protector's parts on their own (src/protect/): the layout of a described state and what
// every rank must share of it, the shard table gathered from other ranks (input from outside),
// the L1 capture worker, the L2 replicator (its ring, its queue of calls, its bound on what a
// neighbour may send) and the L3 writer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "core/params.h"
#include "protect/capture.h"
#include "protect/l3_views.h"
#include "protect/l3_writer.h"
#include "protect/layout.h"
#include "protect/replicator.h"
#include "protect/shard_table.h"
#include "rtft/checkpoint.h"
#include "rtft/testing.h"

namespace rtft::protect {
namespace {

StateDescription State(std::vector<float>* params, std::vector<float>* shard, int world, int rank,
                       int64_t global = 100) {
  StateDescription d;
  d.tensors.push_back({"params", DType::kFloat32, {int64_t(params->size())}, params->data()});
  TensorDesc s = EvenShard("m", DType::kFloat32, {global}, world, rank);
  shard->assign(s.shape[0], float(rank + 1));
  s.data = shard->data();
  d.tensors.push_back(s);
  d.objects.push_back({"o", [] { return StatusOr<std::string>(std::string("x")); },
                       [](const std::string&) { return Status::Ok(); }});
  return d;
}

TEST(LayoutTest, ShardsAreTensorsWithCoordinatesAndTheSharedHashIgnoresTheirSize) {
  std::vector<float> p(10), s0, s1;
  auto a = Layout::Build(State(&p, &s0, 3, 0), 4096);
  auto b = Layout::Build(State(&p, &s1, 3, 2), 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->replicated.size(), 1u);
  ASSERT_EQ(a->sharded.size(), 1u);
  EXPECT_EQ(a->sharded[0].bytes, 34u * 4);  // 100 rows over 3 ranks: 34, 33, 33
  EXPECT_EQ(b->sharded[0].bytes, 33u * 4);
  EXPECT_NE(a->hash, b->hash);                // L1 files of the two are not interchangeable
  EXPECT_EQ(a->shared_hash, b->shared_hash);  // but the ranks describe one state
  auto c = Layout::Build(State(&p, &s1, 3, 0, 101), 4096);
  EXPECT_NE(a->shared_hash, c->shared_hash);  // another global shape is another state
  EXPECT_EQ(a->shard_begin % kAlign, 0u);
  EXPECT_EQ(a->replica_bytes(5), a->objects_begin - a->shard_begin + 5);
}

TEST(ShardTableTest, RowsRoundTripAndBoxesOutsideTheirTensorAreRefused) {
  std::vector<float> p(10), s;
  std::vector<int64_t> rows;
  Layout layout;
  for (int r = 0; r < 3; ++r) {
    layout = *Layout::Build(State(&p, &s, 3, r), 4096);
    const std::vector<int64_t> row = ShardTable::Row(layout);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  auto t = ShardTable::FromRows(layout, rows, 3);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at(1, 0).offset, std::vector<int64_t>{34});
  EXPECT_EQ(t->at(2, 0).shape, std::vector<int64_t>{33});
  EXPECT_EQ(t->Rows(), rows);
  std::vector<int64_t> bad = rows;
  bad[4] = 90;  // rank 2's shard at row 90, 33 rows long: past the end
  EXPECT_EQ(ShardTable::FromRows(layout, bad, 3).status().code(), StatusCode::kDataLoss);
  bad = rows;
  bad[1] = -1;
  EXPECT_EQ(ShardTable::FromRows(layout, bad, 3).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ShardTable::FromRows(layout, {1, 2, 3}, 3).status().code(), StatusCode::kDataLoss);
}

class DirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RTFT_COMM_GLOO_HOST", "127.0.0.1", 1);
    ReloadParams();
    char tmpl[] = "/dev/shm/rtft-parts-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string Dir(int r) {
    const std::string d = root_ + "/" + std::to_string(r);
    std::filesystem::create_directories(d);
    return d;
  }
  std::string root_;
};

TEST_F(DirTest, TheCaptureWorkerCapturesOnItsThreadAndHandsTheStepOn) {
  std::vector<float> p(5000, 1.5f), s;
  Layout layout = *Layout::Build(State(&p, &s, 1, 0), 4096);
  auto l1 = Snapshot::Open(Dir(0), layout);
  ASSERT_TRUE(l1.ok());
  auto c = Capturer::Start(l1->get());
  ASSERT_TRUE(c.ok());
  std::atomic<uint64_t> handed{0};
  std::thread::id worker;
  Capturer::Sealed sealed;
  Capturer::Job job;
  job.step = 4;
  job.objects = "obj";
  job.copied = [&](uint64_t step, Capturer::Sealed s) {
    handed = step + 1;
    worker = std::this_thread::get_id();
    sealed = std::move(s);
  };
  // The worker holds the capture until the file exists: the second Begin() meets it busy
  // however fast the machine copies.
  const std::string go = root_ + "/go";
  ArmFaults(("protect.l1_copy:wait=" + go).c_str());
  ASSERT_TRUE((*c)->Begin(job).ok());
  EXPECT_EQ((*c)->Begin(job).code(), StatusCode::kInternal);  // the last one was not waited for
  std::ofstream(go).close();
  ASSERT_TRUE((*c)->Wait().ok());
  ArmFaults("");
  EXPECT_EQ(handed.load(), 5u);
  EXPECT_NE(worker, std::this_thread::get_id());
  ASSERT_TRUE(sealed.valid());
  EXPECT_TRUE(sealed.get().ok());  // the area was sealed: the replicator may send its checksum
  EXPECT_EQ((*l1)->CompleteSteps(), std::vector<uint64_t>{4});
  // A hand-off that throws is the step's error, not the end of the process.
  job.step = 5;
  job.copied = [](uint64_t, Capturer::Sealed) { throw std::runtime_error("a bug"); };
  ASSERT_TRUE((*c)->Begin(job).ok());
  EXPECT_EQ((*c)->Wait().code(), StatusCode::kInternal);
  EXPECT_TRUE((*c)->Wait().code() == StatusCode::kInternal);  // kept until the next Begin
}

// Three ranks replicating one step around the ring, over `streams` connections per neighbour (the
// replica cut into stripes, one per stream): each holds its left neighbour's replica, byte for
// byte.
class ReplicatorTest : public DirTest, public ::testing::WithParamInterface<int> {};

TEST_P(ReplicatorTest, EachReplicaReachesTheRightNeighbourAndCallsRunInOrder) {
  const int n = 3, streams = GetParam();
  auto store = NewLocalCommStore();
  std::vector<std::vector<float>> params(n, std::vector<float>(777)), shards(n);
  std::vector<Layout> layouts(n);
  std::vector<std::unique_ptr<Snapshot>> l1(n);
  std::vector<std::unique_ptr<ReplicaStore>> l2(n);
  std::vector<std::unique_ptr<Replicator>> reps(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    // A shard of a few pages, its values distinct per rank and element: stripes end mid-shard.
    layouts[r] = *Layout::Build(State(&params[r], &shards[r], n, r, 12345), 4096);
    for (size_t i = 0; i < shards[r].size(); ++i) shards[r][i] = float(r * 100000 + i);
    l1[r] = std::move(*Snapshot::Open(Dir(r), layouts[r]));
    l2[r] = std::move(*ReplicaStore::Open(Dir(r)));
    ASSERT_TRUE(l1[r]->Capture(3, 1, r, n, "objects").ok());
  }
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::vector<std::unique_ptr<Communicator>> comms;
      for (int j = 0; j < streams; ++j) {
        CommOptions o;
        o.rank = r;
        o.world_size = n;
        o.epoch = 1;
        o.name = "replica-test.s" + std::to_string(j);
        o.store = store.get();
        o.host = "127.0.0.1";
        auto comm = Communicator::Create(o);
        ASSERT_TRUE(comm.ok()) << comm.status();
        comms.push_back(std::move(*comm));
      }
      reps[r] = std::move(*Replicator::Start(std::move(comms), l1[r].get(), l2[r].get()));
      const int left = (r + n - 1) % n;
      reps[r]->Expect(layouts[left].replica_bytes(layouts[left].object_capacity));
      reps[r]->Submit(3);
      ASSERT_TRUE(reps[r]->Wait(3).ok());
      // A call runs on the replicator's thread, after the exchange.
      std::thread::id ran;
      ASSERT_TRUE(reps[r]
                      ->Call([&](Communicator* c) {
                        ran = std::this_thread::get_id();
                        return c->Barrier();
                      })
                      .ok());
      EXPECT_NE(ran, std::this_thread::get_id());
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    const int left = (r + n - 1) % n;
    auto held = l2[r]->Find(left, 3);
    ASSERT_TRUE(held.has_value()) << "rank " << r;
    const size_t bytes = layouts[left].replica_bytes(7);
    ASSERT_EQ(held->bytes, bytes);
    EXPECT_EQ(std::memcmp(l2[r]->Data(3), l1[left]->payload(3) + layouts[left].shard_begin, bytes),
              0)
        << "rank " << r;
  }
  reps.clear();  // aborts and joins
}

INSTANTIATE_TEST_SUITE_P(Streams, ReplicatorTest, ::testing::Values(1, 2, 3));

TEST(ReplicatorStart, RefusesNoCommunicator) {
  EXPECT_EQ(Replicator::Start({}, nullptr, nullptr).status().code(), StatusCode::kInvalidArgument);
}

// A step handed over once copied, before its capture is sealed: the bytes go first and the
// checksum after the seal (the promise, set after the hand-off); a capture that failed, or an area
// that was not sealed, ends the exchange with an error and seals nothing.
TEST_F(DirTest, TheChecksumFollowsTheBytesOnceTheCaptureIsSealed) {
  for (const int outcome : {0, 1, 2}) {  // sealed, the capture failed, sealed without the area
    SCOPED_TRACE(outcome);
    auto store = NewLocalCommStore();
    std::vector<std::vector<float>> params(2, std::vector<float>(3000)), shards(2);
    std::vector<Layout> layouts(2);
    std::vector<std::unique_ptr<Snapshot>> l1(2);
    std::vector<std::unique_ptr<ReplicaStore>> l2(2);
    std::vector<std::unique_ptr<Replicator>> reps(2);
    std::vector<std::promise<Status>> seal(2);
    std::vector<Status> waited(2);
    for (int r = 0; r < 2; ++r) {
      layouts[r] = *Layout::Build(State(&params[r], &shards[r], 2, r, 4321), 4096);
      for (size_t i = 0; i < shards[r].size(); ++i) shards[r][i] = float(r * 7000 + i);
      l1[r] = std::move(*Snapshot::Open(Dir(10 * outcome + r), layouts[r]));
      l2[r] = std::move(*ReplicaStore::Open(Dir(10 * outcome + r)));
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        std::vector<std::unique_ptr<Communicator>> comms;
        for (int j = 0; j < 2; ++j) {
          CommOptions o;
          o.rank = r;
          o.world_size = 2;
          o.name = "replica-seal.s" + std::to_string(j);
          o.store = store.get();
          o.host = "127.0.0.1";
          comms.push_back(std::move(*Communicator::Create(o)));
        }
        reps[r] = std::move(*Replicator::Start(std::move(comms), l1[r].get(), l2[r].get()));
        reps[r]->Expect(layouts[1 - r].replica_bytes(layouts[1 - r].object_capacity));
        // Handed over once copied, sealed later: the exchange waits for the seal to end.
        const Status captured = l1[r]->Capture(2, 1, r, 2, "obj");
        if (outcome == 2 && r == 0) l1[r]->Invalidate(2);
        reps[r]->Submit(2, 3, seal[r].get_future().share());
        seal[r].set_value(outcome == 1 && r == 0 ? Status::Internal("the capture failed")
                                                 : captured);
        waited[r] = reps[r]->Wait(2);
        if (!waited[r].ok()) reps[r].reset();  // its peer's exchange in flight ends too
      });
    for (auto& t : threads) t.join();
    if (outcome == 0) {
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(waited[r].ok()) << waited[r];
        auto held = l2[r]->Find(1 - r, 2);
        ASSERT_TRUE(held.has_value()) << "rank " << r;
        EXPECT_EQ(held->bytes, layouts[1 - r].replica_bytes(3));
        EXPECT_EQ(std::memcmp(l2[r]->Data(2), l1[1 - r]->payload(2) + layouts[1 - r].shard_begin,
                              held->bytes),
                  0);
      }
    } else {
      EXPECT_EQ(waited[0].code(), StatusCode::kInternal) << waited[0];
      if (outcome == 2)
        EXPECT_NE(waited[0].message().find("was not sealed"), std::string::npos) << waited[0];
      EXPECT_FALSE(waited[1].ok());
      EXPECT_FALSE(l2[1]->Find(0, 2).has_value());  // rank 0's replica never completed
    }
    reps.clear();
  }
}

TEST_F(DirTest, AReplicaLargerThanTheNeighboursStateIsRefusedBeforeItIsReceived) {
  auto store = NewLocalCommStore();
  std::vector<std::vector<float>> params(2, std::vector<float>(64)), shards(2);
  std::vector<std::unique_ptr<Snapshot>> l1(2);
  std::vector<std::unique_ptr<ReplicaStore>> l2(2);
  std::vector<std::unique_ptr<Replicator>> reps(2);
  std::vector<Status> waited(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Layout layout = *Layout::Build(State(&params[r], &shards[r], 2, r), 4096);
      l1[r] = std::move(*Snapshot::Open(Dir(r), layout));
      l2[r] = std::move(*ReplicaStore::Open(Dir(r)));
      ASSERT_TRUE(l1[r]->Capture(1, 1, r, 2, "").ok());
      CommOptions o;
      o.rank = r;
      o.world_size = 2;
      o.name = "replica-limit";
      o.store = store.get();
      o.host = "127.0.0.1";
      std::vector<std::unique_ptr<Communicator>> comms;
      comms.push_back(std::move(*Communicator::Create(o)));
      reps[r] = std::move(*Replicator::Start(std::move(comms), l1[r].get(), l2[r].get()));
      // Rank 1 expects far less than rank 0 sends.
      reps[r]->Expect(r == 1 ? 16 : layout.replica_bytes(layout.object_capacity));
      reps[r]->Submit(1);
      waited[r] = reps[r]->Wait(1);
      if (r == 1) reps[r].reset();  // its peer's call in flight then ends too
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(waited[1].code(), StatusCode::kDataLoss) << waited[1];
  EXPECT_NE(waited[1].message().find("more than its state's"), std::string::npos) << waited[1];
  EXPECT_FALSE(l2[1]->Find(0, 1).has_value());
  // Rank 0's exchange ended with its peer's communicator; a call after that reports the error.
  EXPECT_FALSE(waited[0].ok());
  EXPECT_FALSE(reps[0]->Call([](Communicator*) { return Status::Ok(); }).ok());
}

TEST_F(DirTest, TheL3WriterWritesFromL1AndRetiresWithoutWaiting) {
  std::vector<float> p(4096, 2.0f), s;
  Layout layout = *Layout::Build(State(&p, &s, 1, 0), 4096);
  auto l1 = Snapshot::Open(Dir(0), layout);
  ASSERT_TRUE((*l1)->Capture(6, 1, 0, 1, "").ok());
  const std::string ckpt = root_ + "/ckpt";
  L3Writer w(ckpt, 3, std::chrono::milliseconds(10000));
  EXPECT_TRUE(w.Due(6));
  EXPECT_FALSE(w.Due(0));
  EXPECT_FALSE(w.Due(7));
  ASSERT_TRUE(w.Open(0, 1, layout.payload_bytes, /*epoch=*/1).ok());
  const AreaView view = OwnAreaView(layout, (*l1)->payload(6), 0, 0, 1);
  ASSERT_TRUE(w.Write(6, view).ok());
  EXPECT_EQ(w.pending(), std::optional<uint64_t>(6));
  ASSERT_TRUE(w.WaitPersisted(6).ok());
  EXPECT_EQ(*LatestVersion(ckpt), 6u);
  // Read back: the replicated tensor whole, the shard at its coordinates.
  std::vector<float> back(4096, 0.0f), shard(100, 0.0f);
  std::string objects;
  Layout into = layout;
  into.replicated[0].tensor.data = back.data();
  into.sharded[0].tensor.data = shard.data();
  ASSERT_TRUE(Restore(ckpt, {}, LiveView(into, &objects)).ok());
  EXPECT_EQ(back, p);
  EXPECT_EQ(shard, s);
  w.Retire();
  EXPECT_FALSE(w.open());
  EXPECT_TRUE(w.Write(9, view).ok());  // no engine: nothing to write, and no error
}

}  // namespace
}  // namespace rtft::protect
