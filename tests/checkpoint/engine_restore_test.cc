// Writer and reader agree: versions saved by the real checkpoint engine verify, and restore
// exactly, into the same number of ranks and into a different one.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::MakeTensor;
using testing::OwnedTensor;

CheckpointOptions Options(const std::string& dir, int rank, int world_size) {
  CheckpointOptions o;
  o.dir = dir;
  o.rank = rank;
  o.world_size = world_size;
  o.pool_bytes = 256 << 10;
  o.chunk_bytes = 64 << 10;
  o.io_backend = "posix";
  return o;
}

// Rank `rank` of `parts` of a [rows, 16] float tensor cut along dim 0; value (r, c) = r * 16 + c.
OwnedTensor<float> RowShard(int64_t rows, int rank, int parts, bool fill) {
  const int64_t lo = rows * rank / parts, hi = rows * (rank + 1) / parts;
  std::vector<float> v((hi - lo) * 16, -1.0f);
  for (size_t i = 0; fill && i < v.size(); ++i) v[i] = static_cast<float>(lo * 16 + i);
  return MakeTensor<float>("opt/m", DType::kFloat32, {hi - lo, 16}, std::move(v),
                           ShardCoords{{rows, 16}, {lo, 0}});
}

TEST(EngineRestore, TwoSavingRanksRestoreIntoThree) {
  TempDir dir;
  const int64_t rows = 5001;  // about 160 KiB per shard: several chunks each
  std::vector<float> shared(777);
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = 0.25f * i;
  std::vector<OwnedTensor<float>> shards;
  std::vector<std::unique_ptr<CheckpointEngine>> engines;
  std::vector<std::unique_ptr<CompositeProvider>> states;
  for (int r = 0; r < 2; ++r) {
    auto engine = CheckpointEngine::Create(Options(dir.path(), r, 2));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engines.push_back(std::move(engine).value());
    shards.push_back(RowShard(rows, r, 2, true));
    states.push_back(std::make_unique<CompositeProvider>(0, 0));
    states[r]->AddTensor(shards[r].desc);
    TensorDesc s;
    s.name = "model/shared";
    s.shape = {777};
    s.data = shared.data();
    states[r]->AddTensor(s);
    states[r]->AddObject({"step", [] { return StatusOr<std::string>("12"); }, nullptr});
  }
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(engines[r]->Checkpoint(4, *states[r]).ok());
  for (int r = 1; r >= 0; --r) ASSERT_TRUE(engines[r]->WaitPersisted(4).ok());

  Status v = VerifyVersion(dir.path(), 4);
  ASSERT_TRUE(v.ok()) << v;
  for (int r = 0; r < 3; ++r) {
    OwnedTensor<float> want = RowShard(rows, r, 3, false);
    std::vector<float> got_shared(777);
    std::string step;
    CompositeProvider state(0, 0);
    state.AddTensor(want.desc);
    TensorDesc s;
    s.name = "model/shared";
    s.shape = {777};
    s.data = got_shared.data();
    state.AddTensor(s);
    state.AddObject({"step", nullptr, [&](const std::string& b) {
                       step = b;
                       return Status::Ok();
                     }});
    Status st = Restore(dir.path(), {}, state);
    ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st;
    EXPECT_EQ(want.storage, RowShard(rows, r, 3, true).storage) << "rank " << r;
    EXPECT_EQ(got_shared, shared);
    EXPECT_EQ(step, "12");
  }
}

// Rows [lo, hi) of `all`, a [rows, cols] row-major tensor, as a shard of solver/u.
OwnedTensor<double> Rows(const std::vector<double>& all, int64_t rows, int64_t cols, int64_t lo,
                         int64_t hi) {
  std::vector<double> v(all.begin() + lo * cols, all.begin() + hi * cols);
  return MakeTensor<double>("solver/u", DType::kFloat64, {hi - lo, cols}, std::move(v),
                            ShardCoords{{rows, cols}, {lo, 0}});
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// float64 through the real engine: two ranks save row shards of a [rows, 37] field (and a
// replicated float64 vector), three ranks and one rank restore them, every bit kept (NaN payloads,
// -0.0, subnormals); the files and MANIFEST.json are format version 2.
TEST(EngineRestore, Float64ShardsRestoreBitForBitIntoThreeRanksAndIntoOne) {
  TempDir dir;
  const int64_t rows = 1001, cols = 37;  // about 145 KiB per shard: several 64 KiB chunks each
  const std::vector<double> field = testing::HardDoubles(rows * cols, 11);
  const std::vector<double> coeffs = testing::HardDoubles(19, 12);
  std::vector<OwnedTensor<double>> shards;
  std::vector<std::unique_ptr<CheckpointEngine>> engines;
  std::vector<std::unique_ptr<CompositeProvider>> states;
  for (int r = 0; r < 2; ++r) {
    auto engine = CheckpointEngine::Create(Options(dir.path(), r, 2));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engines.push_back(std::move(engine).value());
    shards.push_back(Rows(field, rows, cols, rows * r / 2, rows * (r + 1) / 2));
  }
  for (int r = 0; r < 2; ++r) {
    states.push_back(std::make_unique<CompositeProvider>(0, 0));
    states[r]->AddTensor(shards[r].desc);
    states[r]->AddTensor(
        {"solver/coeffs", DType::kFloat64, {19}, const_cast<double*>(coeffs.data())});
  }
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(engines[r]->Checkpoint(2, *states[r]).ok());
  for (int r = 1; r >= 0; --r) ASSERT_TRUE(engines[r]->WaitPersisted(2).ok());
  Status v = VerifyVersion(dir.path(), 2);
  ASSERT_TRUE(v.ok()) << v;
  auto m = ReadFileManifest(RankFilePath(dir.path(), 2, 1));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format_version, 2);
  EXPECT_EQ(m->FindTensor("solver/u")->dtype, DType::kFloat64);
  std::ifstream global(GlobalManifestPath(dir.path(), 2));
  const std::string text((std::istreambuf_iterator<char>(global)), {});
  auto g = GlobalManifest::FromJson(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->format_version, 2);

  // Three ranks: the boundaries (333, 667) fall inside the saved shards (500).
  for (int r = 0; r < 3; ++r) {
    const int64_t lo = rows * r / 3, hi = rows * (r + 1) / 3;
    OwnedTensor<double> want = Rows(std::vector<double>(rows * cols), rows, cols, lo, hi);
    std::vector<double> got_coeffs(19);
    CompositeProvider state(0, 0);
    state.AddTensor(want.desc);
    state.AddTensor({"solver/coeffs", DType::kFloat64, {19}, got_coeffs.data()});
    Status st = Restore(dir.path(), {}, state);
    ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st;
    EXPECT_TRUE(SameBits(want.storage, Rows(field, rows, cols, lo, hi).storage)) << "rank " << r;
    EXPECT_TRUE(SameBits(got_coeffs, coeffs));
  }
  // One rank: the whole field, from both files.
  std::vector<double> whole(rows * cols);
  Status st = Restore(dir.path(), {},
                      TensorProvider({"solver/u", DType::kFloat64, {rows, cols}, whole.data()}));
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(SameBits(whole, field));
}

}  // namespace
}  // namespace rtft
