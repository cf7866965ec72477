// The L1 snapshot and the L2 replica store: a capture is restored bit for bit, the two areas keep
// the two newest steps, a damaged or cut-short area is never restored, a file of another layout
// is ignored, and a reopened file (a restarted process) still holds its complete steps.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/build_config.h"
#include "core/checksum.h"
#include "protect/replica_store.h"
#include "protect/snapshot.h"

namespace rtft::protect {
namespace {

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/dev/shm/rtft-snapshot-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    params_.assign(5000, 0);
    shard_.assign(1234, 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Layout MakeLayout(size_t params) {
    params_.resize(params);
    Layout l;
    l.replicated.push_back(
        {TensorDesc{"params", DType::kFloat32, {int64_t(params)}, params_.data()}});
    l.sharded.push_back(
        {TensorDesc{"m", DType::kFloat32, {int64_t(shard_.size())}, shard_.data()}});
    l.objects.push_back({"counter",
                         [this] { return StatusOr<std::string>(std::to_string(counter_)); },
                         [this](const std::string& s) {
                           counter_ = std::stoi(s);
                           return Status::Ok();
                         }});
    EXPECT_TRUE(l.Finish(4096).ok());
    return l;
  }
  void Fill(int v) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = float(v) + i;
    for (size_t i = 0; i < shard_.size(); ++i) shard_[i] = -float(v) - i;
    counter_ = v;
  }
  std::string dir_;
  std::vector<float> params_, shard_;
  int counter_ = 0;
};

TEST_F(SnapshotTest, CaptureAndRestoreKeepTheTwoNewestSteps) {
  Layout layout = MakeLayout(5000);
  auto snap = Snapshot::Open(dir_, layout);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_TRUE((*snap)->CompleteSteps().empty());
  for (int step = 0; step < 5; ++step) {
    Fill(step);
    auto objects = SerializeObjects(layout.objects);
    ASSERT_TRUE(objects.ok());
    ASSERT_TRUE((*snap)->Capture(step, 1, 0, 1, *objects).ok());
  }
  EXPECT_EQ((*snap)->CompleteSteps(), std::vector<uint64_t>({4, 3}));
  Fill(99);
  ASSERT_TRUE((*snap)->Restore(3).ok());
  EXPECT_EQ(params_[10], 13.0f);
  EXPECT_EQ(shard_[10], -13.0f);
  EXPECT_EQ(counter_, 3);
  EXPECT_EQ((*snap)->Restore(2).code(), StatusCode::kDataLoss) << "overwritten by step 4";
}

TEST_F(SnapshotTest, ARestartedProcessFindsItsStepsAndADamagedAreaIsRefused) {
  Layout layout = MakeLayout(5000);
  {
    auto snap = Snapshot::Open(dir_, layout);
    ASSERT_TRUE(snap.ok());
    for (int step = 7; step < 9; ++step) {
      Fill(step);
      ASSERT_TRUE((*snap)->Capture(step, 1, 0, 1, *SerializeObjects(layout.objects)).ok());
    }
  }
  auto again = Snapshot::Open(dir_, layout);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->CompleteSteps(), std::vector<uint64_t>({8, 7}));
  // A flipped byte in step 8's tensors: that area no longer counts.
  (*again)->payload(8)[100] ^= 1;
  EXPECT_EQ((*again)->CompleteSteps(), std::vector<uint64_t>({7}));
  EXPECT_EQ((*again)->Restore(8).code(), StatusCode::kDataLoss);
  // The same in step 7's shards (the other checksum's range), and back.
  (*again)->payload(7)[layout.shard_begin + 10] ^= 1;
  EXPECT_TRUE((*again)->CompleteSteps().empty());
  (*again)->payload(7)[layout.shard_begin + 10] ^= 1;
  EXPECT_EQ((*again)->CompleteSteps(), std::vector<uint64_t>({7}));
  // A capture cut short (the process died in the middle) is never complete.
  (*again)->Invalidate(7);
  EXPECT_TRUE((*again)->CompleteSteps().empty());
}

TEST_F(SnapshotTest, AFileOfAnotherLayoutIsIgnored) {
  {
    Layout layout = MakeLayout(5000);
    auto snap = Snapshot::Open(dir_, layout);
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE((*snap)->Capture(3, 1, 0, 1, *SerializeObjects(layout.objects)).ok());
  }
  Layout other = MakeLayout(6000);
  auto snap = Snapshot::Open(dir_, other);
  ASSERT_TRUE(snap.ok());
  EXPECT_TRUE((*snap)->CompleteSteps().empty());
}

TEST_F(SnapshotTest, PeekReadsWhatAFileIsLaidOutForAndNothingElse) {
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());  // no file yet
  Layout layout = MakeLayout(5000);
  {
    auto snap = Snapshot::Open(dir_, layout);
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE((*snap)->Capture(3, 1, 2, 4, *SerializeObjects(layout.objects)).ok());
  }
  auto peek = Snapshot::Peek(dir_);
  ASSERT_TRUE(peek.has_value());
  EXPECT_EQ(peek->layout_hash, layout.hash);
  EXPECT_EQ(peek->sharded_bytes, std::vector<uint64_t>({1234 * 4}));
  // Peeking changes nothing: the snapshot still opens with its step.
  auto again = Snapshot::Open(dir_, layout);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->CompleteSteps(), std::vector<uint64_t>({3}));
  again->reset();

  // A damaged header, a file cut short, a link or a FIFO in its place: nothing.
  const std::string l1 = dir_ + "/l1", saved = dir_ + "/saved";
  std::filesystem::copy_file(l1, saved);
  {
    std::fstream f(l1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("XXXXXXXX", 8);  // the magic
  }
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());
  {
    std::fstream f(l1, std::ios::in | std::ios::out | std::ios::binary);
    std::ifstream in(saved, std::ios::binary);
    std::vector<char> head(4096);
    in.read(head.data(), head.size());
    // sharded_count (after magic, format, reserved, hash, area bytes) far past the limit.
    const uint32_t huge = 1u << 30;
    std::memcpy(head.data() + 32, &huge, sizeof(huge));
    f.seekp(0);
    f.write(head.data(), head.size());
  }
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());
  ASSERT_EQ(truncate(l1.c_str(), 100), 0);
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());
  std::filesystem::remove(l1);
  ASSERT_EQ(symlink(saved.c_str(), l1.c_str()), 0);
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());
  std::filesystem::remove(l1);
  ASSERT_EQ(mkfifo(l1.c_str(), 0600), 0);
  EXPECT_FALSE(Snapshot::Peek(dir_).has_value());  // and does not block
  std::filesystem::remove(l1);
  std::filesystem::rename(saved, l1);
  EXPECT_TRUE(Snapshot::Peek(dir_).has_value());
}

TEST_F(SnapshotTest, ObjectsLargerThanTheirRoomAreRefused) {
  Layout layout = MakeLayout(100);
  auto snap = Snapshot::Open(dir_, layout);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ((*snap)->Capture(1, 1, 0, 1, std::string(8192, 'x')).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE((*snap)->CompleteSteps().empty());
}

TEST_F(SnapshotTest, DuplicateNamesAndHostMemoryDescribedAsDeviceMemoryAreRefused) {
  Layout l;
  l.replicated.push_back({TensorDesc{"a", DType::kFloat32, {4}, params_.data()}});
  l.sharded.push_back({TensorDesc{"a", DType::kFloat32, {4}, shard_.data()}});
  EXPECT_EQ(l.Finish(4096).code(), StatusCode::kInvalidArgument);
  Layout d;
  TensorDesc t{"d", DType::kFloat32, {4}, params_.data()};
  t.memory = MemoryKind::kDevice;
  d.replicated.push_back({t});
  // A host pointer called device memory: refused before any copy (without CUDA: unimplemented).
  EXPECT_EQ(d.Finish(4096).code(),
            RTFT_WITH_CUDA ? StatusCode::kInvalidArgument : StatusCode::kUnimplemented);
}

TEST_F(SnapshotTest, TheChecksumsHashedWhileCopyingAreThoseOfTheWholeRanges) {
  // Tensors of several 64 KiB pieces and of none, unaligned sizes: the checksums computed piece
  // by piece during the copy must be those of the area's two ranges, padding included.
  Layout layout = MakeLayout(300001);
  shard_.assign(77777, 0);
  layout.sharded[0].tensor.shape = {int64_t(shard_.size())};
  layout.sharded[0].tensor.data = shard_.data();
  std::vector<float> empty;
  layout.sharded.push_back({TensorDesc{"none", DType::kFloat32, {0}, empty.data()}});
  ASSERT_TRUE(layout.Finish(4096).ok());
  auto snap = Snapshot::Open(dir_, layout);
  ASSERT_TRUE(snap.ok()) << snap.status();
  for (int step = 0; step < 3; ++step) {
    Fill(step + 7);
    auto objects = SerializeObjects(layout.objects);
    ASSERT_TRUE(objects.ok());
    ASSERT_TRUE((*snap)->Capture(step, 1, 0, 1, *objects).ok());
    const AreaHeader* h = (*snap)->header(step);
    const char* p = (*snap)->payload(step);
    const size_t end = layout.objects_begin + h->object_bytes;
    EXPECT_EQ(h->checksum, ChunkedXxh3(p, layout.shard_begin));
    EXPECT_EQ(h->replica_checksum, ChunkedXxh3(p + layout.shard_begin, end - layout.shard_begin));
    const uint64_t captured[2] = {h->checksum, h->replica_checksum};
    (*snap)->Seal(step, 1, 0, 1, h->object_bytes);  // what recovery does after a transfer
    EXPECT_EQ(h->checksum, captured[0]);
    EXPECT_EQ(h->replica_checksum, captured[1]);
  }
  EXPECT_EQ((*snap)->CompleteSteps(), std::vector<uint64_t>({2, 1}));
}

// A replicated tensor that compute changes (a module's buffer, declared first here) is laid out
// after the others and checksummed apart: two ranks whose buffers differ have the same compared
// checksum, which the cross-check gathers, and a parameter that differs changes it; a flip in the
// buffer's bytes still fails the area's verification.
TEST_F(SnapshotTest, TensorsThatComputeChangesAreLeftOutOfTheComparedChecksum) {
  std::vector<float> buffers[2] = {std::vector<float>(300, 1.0f), std::vector<float>(300, 2.0f)};
  std::vector<uint64_t> compared;
  for (int r = 0; r < 2; ++r) {
    Layout layout;
    TensorDesc bn{"bn", DType::kFloat32, {300}, buffers[r].data()};
    bn.changed_in_compute = true;
    layout.replicated.push_back({bn});
    layout.replicated.push_back({TensorDesc{"w", DType::kFloat32, {5000}, params_.data()}});
    ASSERT_TRUE(layout.Finish(4096).ok());
    ASSERT_EQ(layout.replicated[0].tensor.name, "w");  // the compared ones first
    EXPECT_EQ(layout.compared_end, layout.replicated[1].offset);
    EXPECT_LT(layout.compared_end, layout.shard_begin);
    const std::string dir = dir_ + "/rank" + std::to_string(r);
    std::filesystem::create_directories(dir);
    auto snap = Snapshot::Open(dir, layout);
    ASSERT_TRUE(snap.ok()) << snap.status();
    Fill(3);
    ASSERT_TRUE((*snap)->CaptureEarly(4, nullptr).ok());
    ASSERT_TRUE((*snap)->Capture(4, 1, r, 2, "").ok());
    EXPECT_TRUE((*snap)->Verify(4));
    const AreaHeader* h = (*snap)->header(4);
    compared.push_back(h->checksum);
    EXPECT_EQ(h->checksum, ChunkedXxh3((*snap)->payload(4), layout.compared_end));
    if (r == 1) {
      params_[17] += 1.0f;  // another parameter: another compared checksum
      ASSERT_TRUE((*snap)->CaptureEarly(5, nullptr).ok());
      ASSERT_TRUE((*snap)->Capture(5, 1, r, 2, "").ok());
      EXPECT_NE((*snap)->header(5)->checksum, compared[0]);
      (*snap)->payload(4)[layout.replicated[1].offset + 5] ^= 1;  // a flip in the buffer
      EXPECT_FALSE((*snap)->Verify(4));
    }
  }
  EXPECT_EQ(compared[0], compared[1]);
}

TEST_F(SnapshotTest, ReplicasAreUsedOnlyWhenTheyCheckOut) {
  auto store = ReplicaStore::Open(dir_);
  ASSERT_TRUE(store.ok());
  std::string data(100000, 'r');
  auto dst = (*store)->Prepare(6, data.size());
  ASSERT_TRUE(dst.ok());
  std::memcpy(*dst, data.data(), data.size());
  // A replica damaged on the way (the checksum is the sender's) is sealed but never held.
  (*store)->Seal(6, 2, 1, data.size(), ChunkedXxh3(data.data(), data.size()) + 1);
  EXPECT_TRUE((*store)->Complete().empty());
  (*store)->Seal(6, 2, 1, data.size(), ChunkedXxh3(data.data(), data.size()));
  auto held = (*store)->Complete();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].owner, 2);
  EXPECT_EQ(held[0].step, 6u);
  EXPECT_EQ(std::memcmp((*store)->Data(6), data.data(), data.size()), 0);
  // Reopened (a restarted process), it is still there; a flipped byte and it is not.
  auto again = ReplicaStore::Open(dir_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Complete().size(), 1u);
  const_cast<char*>((*again)->Data(6))[5] ^= 1;
  EXPECT_TRUE((*again)->Complete().empty());
}

}  // namespace
}  // namespace rtft::protect
