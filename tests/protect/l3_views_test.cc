// How the protected layout places what the data-parallel group shares and what each rank owns,
// and what the L3 views hand the checkpoint engine from an area (src/protect/layout.h,
// l3_views.h): a shard the group holds whole (HSDP's), a buffer that differs per rank.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "protect/l3_views.h"
#include "protect/layout.h"

namespace rtft::protect {
namespace {

// HSDP on a grid of tensor 2 x data 2: partition t holds rows [3t, 3t + 3) of a 6 x 4 tensor, the
// same on both ranks of its data-parallel group (ShardCoords::replicated). It is laid out with the
// replicated tensors (compared across the group, never in L2's ring), the group's ranks describe
// one state and the two partitions two; L3 writes each group rank's share of the shard's rows at
// their place in the global tensor, and recovery restores the shard at its own coordinates.
TEST(LayoutTest, AShardTheDataParallelGroupSharesIsLaidOutAsReplicated) {
  std::vector<float> rows[2] = {std::vector<float>(12, 1.0f), std::vector<float>(12, 2.0f)};
  auto describe = [&](int t) {
    StateDescription d;
    TensorDesc w{"w", DType::kFloat32, {3, 4}, rows[t].data()};
    w.shard.global_shape = {6, 4};
    w.shard.offset = {3 * t, 0};
    w.shard.replicated = true;
    d.tensors.push_back(w);
    return d;
  };
  auto t0 = Layout::Build(describe(0), 4096), t1 = Layout::Build(describe(1), 4096);
  ASSERT_TRUE(t0.ok() && t1.ok()) << t0.status().ToString();
  ASSERT_EQ(t0->replicated.size(), 1u);
  EXPECT_TRUE(t0->sharded.empty());
  EXPECT_EQ(t0->shard_begin, t0->objects_begin);  // nothing for L2's ring but the objects
  EXPECT_NE(t0->shared_hash, t1->shared_hash);    // two partitions: two states
  EXPECT_EQ(t0->shared_hash, Layout::Build(describe(0), 4096)->shared_hash);
  // L3: each of the group's two ranks writes its rows of the shard (2 and 1), at 3t + its first.
  std::vector<char> area(t1->payload_bytes);
  for (int d = 0; d < 2; ++d) {
    StateDescription out;
    ASSERT_TRUE(OwnAreaView(*t1, area.data(), 0, d, 2).Describe(&out).ok());
    ASSERT_EQ(out.tensors.size(), 1u);
    const TensorDesc& w = out.tensors[0];
    EXPECT_EQ(w.shard.global_shape, (std::vector<int64_t>{6, 4}));
    EXPECT_EQ(w.shape, (std::vector<int64_t>{d == 0 ? 2 : 1, 4}));
    EXPECT_EQ(w.shard.offset, (std::vector<int64_t>{d == 0 ? 3 : 5, 0}));
    EXPECT_EQ(w.data, area.data() + t1->replicated[0].offset + (d == 0 ? 0 : 2 * 16));
  }
  // Restore fills the shard where it is in the global tensor, not a whole tensor of its shape.
  std::string objects;
  StateDescription live;
  ASSERT_TRUE(LiveView(*t1, &objects).Describe(&live).ok());
  EXPECT_EQ(live.tensors[0].shard.global_shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(live.tensors[0].shard.offset, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(live.tensors[0].shape, (std::vector<int64_t>{3, 4}));
}

// A replicated tensor that compute changes (a module's buffer, which may differ per rank between
// steps) goes to L3 whole from the group's first rank: never rows of several ranks' copies.
TEST(LayoutTest, ABufferGoesToL3WholeFromTheGroupsFirstRank) {
  std::vector<float> w(8, 1.0f), bn(6, 2.0f);
  StateDescription d;
  d.tensors.push_back({"w", DType::kFloat32, {8}, w.data()});
  TensorDesc b{"bn", DType::kFloat32, {6}, bn.data()};
  b.changed_in_compute = true;
  d.tensors.push_back(b);
  auto layout = Layout::Build(d, 4096);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<char> area(layout->payload_bytes);
  for (int r = 0; r < 2; ++r) {
    StateDescription out;
    ASSERT_TRUE(OwnAreaView(*layout, area.data(), 0, r, 2).Describe(&out).ok());
    std::map<std::string, TensorDesc> by_name;
    for (const TensorDesc& t : out.tensors) by_name[t.name] = t;
    EXPECT_EQ(by_name.at("w").shape, (std::vector<int64_t>{4}));  // rows of w on each rank
    EXPECT_EQ(by_name.count("bn"), r == 0 ? 1u : 0u);
    if (r == 0) {
      EXPECT_EQ(by_name.at("bn").shape, (std::vector<int64_t>{6}));
      EXPECT_EQ(by_name.at("bn").shard.offset, (std::vector<int64_t>{0}));
    }
  }
}

}  // namespace
}  // namespace rtft::protect
