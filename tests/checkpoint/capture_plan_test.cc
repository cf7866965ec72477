#include "checkpoint/capture/capture_plan.h"

#include <gtest/gtest.h>

namespace rtft {
namespace {

TensorDesc T(const std::string& name, int64_t floats, int group = -1,
             MemoryKind memory = MemoryKind::kHost) {
  TensorDesc t;
  t.name = name;
  t.shape = {floats};
  t.coalesce_group = group;
  t.memory = memory;
  return t;
}

TEST(CapturePlan, SplitsLargeTensorsAtChunkBoundaries) {
  auto units = PlanCaptureUnits({T("big", 2500)}, 4096);  // 10000 bytes
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].pieces[0].tensor_offset, 0u);
  EXPECT_EQ(units[1].pieces[0].tensor_offset, 4096u);
  EXPECT_EQ(units[2].pieces[0].bytes, 10000u - 8192u);
}

TEST(CapturePlan, PacksCoalescedTensorsUpToAChunk) {
  std::vector<TensorDesc> ts;
  for (int i = 0; i < 10; ++i) ts.push_back(T("s" + std::to_string(i), 100, 0));  // 400 B each
  ts.push_back(T("big", 2048, 0));  // 8 KiB: larger than the chunk, planned on its own
  ts.push_back(T("dev", 10, 0, MemoryKind::kDevice));
  ts.push_back(T("empty", 0, 0));
  auto units = PlanCaptureUnits(ts, 4096);
  // Invariants of every unit: one memory kind, pieces inside the span, large pieces page-aligned.
  size_t pieces = 0;
  for (const auto& u : units) {
    EXPECT_LE(u.span_bytes, 4096u + 4096u);
    for (const auto& p : u.pieces) {
      EXPECT_EQ(u.memory, ts[p.tensor].memory);
      EXPECT_LE(p.span_offset + p.bytes, u.span_bytes);
      if (p.bytes >= 4096) EXPECT_EQ(p.span_offset % 4096, 0u);
      ++pieces;
    }
  }
  EXPECT_EQ(pieces, 10u + 2u + 1u);  // empty tensors have no pieces
  // The ten small host tensors share units: fewer units than tensors.
  size_t small_units = 0;
  for (const auto& u : units)
    if (u.memory == MemoryKind::kHost && u.pieces.size() > 1) ++small_units;
  EXPECT_GE(small_units, 1u);
  EXPECT_LT(units.size(), 10u);
}

}  // namespace
}  // namespace rtft
