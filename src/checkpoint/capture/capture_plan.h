// Splits a state's tensors into capture units: the pieces that move together through the
// pinned pool. A large tensor becomes pieces of at most chunk_bytes; small tensors that share a
// coalesce group are packed into one unit, so thousands of small shards cost a few transfers.
// Pieces never straddle a chunk_bytes boundary of their tensor, so each piece's checksum is one
// of the manifest's chunk checksums.
#pragma once

#include <cstdint>
#include <vector>

#include "rtft/state.h"

namespace rtft {

struct PlannedPiece {
  size_t tensor = 0;           // index into the tensor list
  uint64_t tensor_offset = 0;  // first byte of the piece within the tensor
  uint64_t bytes = 0;
  uint64_t span_offset = 0;  // where the piece sits in the unit's pool span
};

struct PlannedUnit {
  std::vector<PlannedPiece> pieces;
  uint64_t span_bytes = 0;
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;
};

// chunk_bytes must be a positive multiple of 4096. Empty tensors get no pieces.
std::vector<PlannedUnit> PlanCaptureUnits(const std::vector<TensorDesc>& tensors,
                                          uint64_t chunk_bytes);

}  // namespace rtft
