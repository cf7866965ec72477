// Writer and reader agree: versions saved by the real checkpoint engine verify, and restore
// exactly, into the same number of ranks and into a different one.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rtft
