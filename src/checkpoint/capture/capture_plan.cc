#include "checkpoint/capture/capture_plan.h"

#include "core/check.h"

namespace rtft {
namespace {

constexpr uint64_t kPageAlignment = 4096;  // pieces that may go out with O_DIRECT
constexpr uint64_t kSmallAlignment = 64;

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Pieces of 4 KiB or more land on page boundaries, so their aligned part can be written with
// O_DIRECT straight from the pool.
uint64_t PlaceIn(uint64_t used, uint64_t bytes) {
  return RoundUp(used, bytes >= kPageAlignment ? kPageAlignment : kSmallAlignment);
}

}  // namespace

std::vector<PlannedUnit> PlanCaptureUnits(const std::vector<TensorDesc>& tensors,
                                          uint64_t chunk_bytes) {
  RTFT_CHECK(chunk_bytes > 0 && chunk_bytes % kPageAlignment == 0);
  std::vector<PlannedUnit> units;
  // The open unit of the current coalesce group, if any.
  int open_group = -1;
  size_t open_unit = 0;

  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorDesc& t = tensors[i];
    const uint64_t bytes = t.bytes();
    if (bytes == 0) continue;
    const bool coalesce = t.coalesce_group >= 0 && bytes <= chunk_bytes;
    if (coalesce) {
      bool fits = false;
      if (open_group == t.coalesce_group) {
        PlannedUnit& u = units[open_unit];
        fits = u.memory == t.memory && u.device == t.device &&
               PlaceIn(u.span_bytes, bytes) + bytes <= chunk_bytes;
      }
      if (!fits) {
        units.push_back(PlannedUnit{{}, 0, t.memory, t.device});
        open_unit = units.size() - 1;
        open_group = t.coalesce_group;
      }
      PlannedUnit& u = units[open_unit];
      const uint64_t at = PlaceIn(u.span_bytes, bytes);
      u.pieces.push_back(PlannedPiece{i, 0, bytes, at});
      u.span_bytes = at + bytes;
      continue;
    }
    open_group = -1;
    for (uint64_t off = 0; off < bytes; off += chunk_bytes) {
      const uint64_t n = std::min(chunk_bytes, bytes - off);
      units.push_back(PlannedUnit{{PlannedPiece{i, off, n, 0}}, n, t.memory, t.device});
    }
  }
  return units;
}

}  // namespace rtft
