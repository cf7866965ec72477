// Resharding: the box helpers against an element-by-element reference, and restores of 2-D
// tensors saved by N ranks into M ranks (2 -> 3, 4 -> 1, 1 -> 3), split along either dimension.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "checkpoint/read/box_copy.h"
#include "checkpoint_fixture.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::MakeTensor;
using testing::OwnedTensor;
using testing::RankState;

// Element-by-element reference for CopyRegion, over a global tensor of `global` shape whose
// element at linear index i is i.
void ReferenceFill(const Box& box, const Box& region, std::vector<int64_t>& dst) {
  std::vector<int64_t> idx(region.shape.size(), 0);
  for (uint64_t n = 0; n < region.elements(); ++n) {
    uint64_t at = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      at = at * box.shape[d] + (region.offset[d] + idx[d] - box.offset[d]);
    int64_t value = 0;
    for (size_t d = 0; d < idx.size(); ++d) value = value * 1000 + region.offset[d] + idx[d];
    dst[at] = value;
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < region.shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Contents of `box`: each element is its global coordinates written in base 1000.
std::vector<int64_t> Contents(const Box& box) {
  std::vector<int64_t> out(box.elements());
  ReferenceFill(box, box, out);
  return out;
}

TEST(BoxCopy, IntersectAndElements) {
  Box a{{0, 2}, {4, 3}}, b{{3, 0}, {5, 4}};
  EXPECT_EQ(Intersect(a, b), (Box{{3, 2}, {1, 2}}));
  EXPECT_EQ(Intersect(a, Box{{4, 0}, {1, 1}}).elements(), 0u);
  EXPECT_EQ(Box{}.elements(), 1u);  // a scalar
  EXPECT_EQ(Intersect(Box{}, Box{}).elements(), 1u);
}

TEST(BoxCopy, MatchesReferenceForRandomBoxesUpToRank4) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = trial % 5;  // 0 (scalar) .. 4
    std::vector<int64_t> global(rank);
    for (auto& g : global) g = 1 + rng() % 6;
    auto random_box = [&] {
      Box b;
      for (int d = 0; d < rank; ++d) {
        int64_t lo = rng() % global[d], hi = lo + 1 + rng() % (global[d] - lo);
        b.offset.push_back(lo);
        b.shape.push_back(hi - lo);
      }
      return b;
    };
    Box src = random_box(), dst = random_box();
    Box region = Intersect(src, dst);
    std::vector<int64_t> from = Contents(src);
    std::vector<int64_t> got(dst.elements(), -1), want(dst.elements(), -1);
    EXPECT_EQ(CopyRegion(from.data(), src, got.data(), dst, region, sizeof(int64_t)),
              region.elements());
    ReferenceFill(dst, region, want);
    ASSERT_EQ(got, want) << "trial " << trial;
  }
}

// A [rows, cols] float tensor whose value at (r, c) is r * 100 + c + 0.25.
std::vector<float> GlobalValues(int64_t rows, int64_t cols) {
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = r * 100.0f + c + 0.25f;
  return v;
}

// Part `i` of `parts` of the global tensor cut along `dim` (sizes differ by at most one).
OwnedTensor<float> Shard(const std::vector<float>& global, int64_t rows, int64_t cols, int dim,
                         int i, int parts, bool fill) {
  const int64_t n = dim == 0 ? rows : cols;
  const int64_t lo = n * i / parts, hi = n * (i + 1) / parts;
  std::vector<int64_t> shape =
      dim == 0 ? std::vector<int64_t>{hi - lo, cols} : std::vector<int64_t>{rows, hi - lo};
  std::vector<int64_t> offset =
      dim == 0 ? std::vector<int64_t>{lo, 0} : std::vector<int64_t>{0, lo};
  std::vector<float> values(shape[0] * shape[1], -1.0f);
  if (fill)
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c)
        values[r * shape[1] + c] = global[(r + offset[0]) * cols + c + offset[1]];
  return MakeTensor<float>("opt/m", DType::kFloat32, shape, std::move(values),
                           ShardCoords{{rows, cols}, offset});
}

struct ReshardCase {
  int saved;
  int restoring;
  int save_dim;
  int restore_dim;
};

class Reshard : public ::testing::TestWithParam<ReshardCase> {};

TEST_P(Reshard, EveryRestoringRankGetsExactlyItsPart) {
  const ReshardCase c = GetParam();
  const int64_t rows = 13, cols = 7;
  const std::vector<float> global = GlobalValues(rows, cols);
  TempDir dir;
  std::vector<OwnedTensor<float>> saved;
  std::vector<RankState> states(c.saved);
  for (int r = 0; r < c.saved; ++r) {
    saved.push_back(Shard(global, rows, cols, c.save_dim, r, c.saved, /*fill=*/true));
    states[r].tensors.push_back(saved.back().desc);
  }
  testing::FixtureOptions options;
  options.chunk_bytes = 64;  // several chunks per shard
  ASSERT_TRUE(testing::WriteVersion(dir.path(), 3, c.saved, states, options).ok());

  for (int r = 0; r < c.restoring; ++r) {
    OwnedTensor<float> want = Shard(global, rows, cols, c.restore_dim, r, c.restoring, false);
    OwnedTensor<float> expected = Shard(global, rows, cols, c.restore_dim, r, c.restoring, true);
    if (c.restoring == 1) want.desc.shard = {};  // one rank wants the whole, unsharded tensor
    Status s = Restore(dir.path(), {}, TensorProvider(want.desc));
    ASSERT_TRUE(s.ok()) << "restoring rank " << r << ": " << s;
    EXPECT_EQ(want.storage, expected.storage) << "restoring rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Reshard,
                         ::testing::Values(ReshardCase{2, 3, 0, 0}, ReshardCase{2, 3, 1, 1},
                                           ReshardCase{2, 3, 0, 1}, ReshardCase{4, 1, 0, 0},
                                           ReshardCase{4, 1, 1, 1}, ReshardCase{1, 3, 0, 1},
                                           ReshardCase{3, 3, 1, 1}));

TEST(Reshard, MissingShardIsDataLossNamingTheTensor) {
  const int64_t rows = 8, cols = 4;
  const std::vector<float> global = GlobalValues(rows, cols);
  TempDir dir;
  auto a = Shard(global, rows, cols, 0, 0, 4, true);
  auto b = Shard(global, rows, cols, 0, 1, 4, true);
  auto d = Shard(global, rows, cols, 0, 3, 4, true);  // part 2 of 4 was never saved
  ASSERT_TRUE(
      testing::WriteVersion(dir.path(), 1, 3, {{{a.desc}, {}}, {{b.desc}, {}}, {{d.desc}, {}}})
          .ok());
  auto whole =
      MakeTensor<float>("opt/m", DType::kFloat32, {rows, cols}, std::vector<float>(rows * cols));
  Status s = Restore(dir.path(), {}, TensorProvider(whole.desc));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("'opt/m'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cover 24 of the 32"), std::string::npos) << s;
  // The first half is still restorable.
  auto top = Shard(global, rows, cols, 0, 0, 2, false);
  EXPECT_TRUE(Restore(dir.path(), {}, TensorProvider(top.desc)).ok());
}

TEST(Reshard, GlobalShapeMustAgree) {
  const std::vector<float> global = GlobalValues(6, 4);
  TempDir dir;
  auto a = Shard(global, 6, 4, 0, 0, 2, true);
  auto b = Shard(global, 6, 4, 0, 1, 2, true);
  ASSERT_TRUE(testing::WriteVersion(dir.path(), 1, 2, {{{a.desc}, {}}, {{b.desc}, {}}}).ok());
  const std::vector<float> other = GlobalValues(6, 5);
  auto want = Shard(other, 6, 5, 1, 0, 2, false);
  Status s = Restore(dir.path(), {}, TensorProvider(want.desc));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'opt/m'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[6, 4]"), std::string::npos) << s;
}

}  // namespace
}  // namespace rtft
