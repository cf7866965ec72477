// The interleaved offload's performance model as arithmetic: predictions on synthetic rates,
// the share it chooses (more than half when the GPU path is faster, none when PCIe is the
// bottleneck, limited by the memory budget), and copy time over overlapping streams. Also the
// layout of subgroups over parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "offload/layout.h"
#include "offload/perf_model.h"

namespace rtft::offload {
namespace {

OffloadShape Shape(uint64_t subgroups, uint64_t sub_elems, uint64_t budget) {
  OffloadShape s;
  s.subgroups = subgroups;
  s.subgroup_elements = sub_elems;
  s.elements = subgroups * sub_elems;
  s.param_bytes = 2;
  s.gpu_budget_bytes = budget;
  return s;
}

// The GPU machine's figures: 55 GB/s each way, 98 together, a 121 B/s GPU AdamW and a 2 B/s CPU.
OffloadRates H200() {
  OffloadRates r;
  r.cpu_elems_per_s = 2e9;
  r.gpu_elems_per_s = 121e9;
  r.h2d_bytes_per_s = 55e9;
  r.d2h_bytes_per_s = 55e9;
  r.duplex_bytes_per_s = 98e9;
  return r;
}

TEST(PerfModel, SlotsFollowTheBudget) {
  const uint64_t s = 1 << 20;  // 12 MiB of state per slot, 8 MiB of gradient staging
  EXPECT_EQ(SlotsWithinBudget(Shape(10, s, 0)), 0);
  EXPECT_EQ(SlotsWithinBudget(Shape(10, s, 12 * s + 8 * s - 1)), 0);
  EXPECT_EQ(SlotsWithinBudget(Shape(10, s, 12 * s + 8 * s)), 1);
  EXPECT_EQ(SlotsWithinBudget(Shape(10, s, 24 * s + 8 * s)), 2);
  EXPECT_EQ(SlotsWithinBudget(Shape(10, s, 1ull << 40)), kMaxSlots);
  EXPECT_EQ(GpuBytesForSlots(Shape(10, s, 0), 3), 36 * s + 8 * s);
}

TEST(PerfModel, PredictsCpuOnlyAndGpuOnly) {
  const OffloadShape shape = Shape(100, 10'000'000, 1ull << 40);  // 1 B parameters
  const OffloadRates r = H200();
  // CPU only: the update itself (0.5 s) dominates the gradients' 4 GB down (73 ms).
  const double cpu = PredictSeconds(shape, r, 0, 3);
  EXPECT_NEAR(cpu, 1e9 / 2e9 + 1e7 * 4 / 55e9 + 1e7 * 2 / 55e9, 1e-6);
  // All on the GPU: 12 GB each way; the links' joint limit (24 GB at 98 GB/s) binds.
  const double gpu = PredictSeconds(shape, r, 100, 3);
  EXPECT_NEAR(gpu, 24e9 / 98e9, 0.01);
}

TEST(PerfModel, ChoosesMoreThanHalfWhenTheGpuPathIsFaster) {
  const OffloadShape shape = Shape(100, 10'000'000, 1ull << 40);
  const ShareChoice c = ChooseShare(shape, H200());
  EXPECT_GT(c.gpu_subgroups, 50u);
  EXPECT_LT(c.gpu_subgroups, 100u);  // the CPU still takes a part
  EXPECT_EQ(c.slots, kMaxSlots);
  // The choice is the minimum: neighbours are not better.
  for (uint64_t g : {c.gpu_subgroups - 1, c.gpu_subgroups + 1})
    EXPECT_GE(PredictSeconds(shape, H200(), g, c.slots), c.predicted_seconds);
  // And beats CPU-only by the margin the paper reports (2.5x and more).
  EXPECT_GT(PredictSeconds(shape, H200(), 0, 3) / c.predicted_seconds, 2.5);
}

TEST(PerfModel, ChoosesNothingWhenPcieIsSlowOrTheBudgetTooSmall) {
  OffloadRates slow = H200();
  slow.h2d_bytes_per_s = slow.d2h_bytes_per_s = 1e9;  // a 1 GB/s link
  slow.duplex_bytes_per_s = 0;
  slow.cpu_elems_per_s = 5e9;
  EXPECT_EQ(ChooseShare(Shape(100, 1'000'000, 1ull << 40), slow).gpu_subgroups, 0u);
  const ShareChoice none = ChooseShare(Shape(100, 1'000'000, 1000), H200());
  EXPECT_EQ(none.slots, 0);
  EXPECT_EQ(none.gpu_subgroups, 0u);
}

TEST(PerfModel, ShareBalancesCpuAgainstLinks) {
  // Analytic optimum without pipeline terms: (1-x)/cpu = (4 + 8x)/d2h (gradients down for the
  // CPU share, state down for the GPU share).
  OffloadRates r = H200();
  r.duplex_bytes_per_s = 0;
  const OffloadShape shape = Shape(1000, 1'000'000, 1ull << 40);
  const double x = (1.0 / r.cpu_elems_per_s - 4.0 / r.d2h_bytes_per_s) /
                   (1.0 / r.cpu_elems_per_s + 8.0 / r.d2h_bytes_per_s);
  const ShareChoice c = ChooseShare(shape, r);
  EXPECT_NEAR(static_cast<double>(c.gpu_subgroups) / 1000.0, x, 0.01);
}

TEST(PerfModel, FewerSlotsPipelineWorse) {
  const OffloadShape shape = Shape(20, 10'000'000, 1ull << 40);
  const OffloadRates r = H200();
  const double three = PredictSeconds(shape, r, 20, 3);
  const double two = PredictSeconds(shape, r, 20, 2);
  const double one = PredictSeconds(shape, r, 20, 1);
  EXPECT_LE(three, two);
  EXPECT_LT(two, one);
}

TEST(PerfModel, StaticShareRounds) {
  const OffloadShape shape = Shape(10, 1000, 1ull << 40);
  EXPECT_EQ(FixedShare(shape, H200(), 0.34).gpu_subgroups, 3u);
  EXPECT_EQ(FixedShare(shape, H200(), 1.5).gpu_subgroups, 10u);
  EXPECT_EQ(FixedShare(shape, OffloadRates{}, 0.5).predicted_seconds, 0.0);
}

TEST(PerfModel, CopyTimeIsTheUnionOfOverlappingIntervals) {
  EXPECT_DOUBLE_EQ(UnionSeconds({}), 0.0);
  // Three streams on one link: [0, 2] and [1, 3] overlap, [5, 6] stands apart, [2.5, 2.5] is
  // empty; the link was busy 4 s, not the 6 s the durations add up to.
  EXPECT_DOUBLE_EQ(UnionSeconds({{5, 6}, {1, 3}, {0, 2}, {2.5, 2.5}}), 4.0);
  EXPECT_DOUBLE_EQ(UnionSeconds({{0, 10}, {1, 2}, {3, 4}}), 10.0);  // nested
  EXPECT_DOUBLE_EQ(UnionSeconds({{0, 1}, {1, 2}}), 2.0);            // touching
}

TEST(Layout, SubgroupsCoverParametersExactly) {
  std::vector<OffloadParam> params(4);
  const uint64_t sizes[] = {10, 0, 25, 3};
  for (size_t i = 0; i < 4; ++i) {
    params[i].name = "p" + std::to_string(i);
    params[i].elements = sizes[i];
    params[i].dtype = i == 2 ? DType::kFloat32 : DType::kBFloat16;
  }
  const Layout l = BuildLayout(params, 8, 3);
  EXPECT_EQ(l.elements, 38u);
  EXPECT_EQ(l.low_bytes, 10 * 2 + 25 * 4 + 3 * 2u);
  ASSERT_EQ(l.subgroups.size(), 5u);  // 8, 8, 8, 8, 6
  EXPECT_EQ(l.subgroups[4].n, 6u);
  std::vector<int> covered(38, 0);
  for (size_t g = 0; g < l.subgroups.size(); ++g) {
    uint64_t seg_total = 0, task_total = 0;
    for (const Segment& s : l.subgroups[g].segments) {
      EXPECT_GT(s.n, 0u);
      EXPECT_LE(s.param_offset + s.n, params[s.param].elements);
      EXPECT_EQ(s.flat_offset, l.param_flat_offset[s.param] + s.param_offset);
      seg_total += s.n;
    }
    for (const CpuTask& t : l.subgroups[g].tasks) {
      EXPECT_EQ(t.subgroup, g);
      EXPECT_LE(t.segment.n, 3u);
      for (uint64_t k = 0; k < t.segment.n; ++k) ++covered[t.segment.flat_offset + k];
      task_total += t.segment.n;
    }
    EXPECT_EQ(seg_total, l.subgroups[g].n);
    EXPECT_EQ(task_total, l.subgroups[g].n);
  }
  for (int c : covered) EXPECT_EQ(c, 1);
  // Subgroup 1 = elements 8..15: the end of p0 and the start of p2 (p1 is empty).
  ASSERT_EQ(l.subgroups[1].segments.size(), 2u);
  EXPECT_EQ(l.subgroups[1].segments[0].param, 0u);
  EXPECT_EQ(l.subgroups[1].segments[1].param, 2u);
}

}  // namespace
}  // namespace rtft::offload
