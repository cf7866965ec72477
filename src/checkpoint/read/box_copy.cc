#include "checkpoint/read/box_copy.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace rtft {
namespace {

// Row-major strides in elements.
std::vector<uint64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * static_cast<uint64_t>(shape[d]);
  return strides;
}

// Element offset of (region.offset + index) inside `box`.
uint64_t Linear(const Box& box, const std::vector<uint64_t>& strides, const Box& region,
                const std::vector<int64_t>& index) {
  uint64_t at = 0;
  for (size_t d = 0; d < index.size(); ++d)
    at += static_cast<uint64_t>(region.offset[d] + index[d] - box.offset[d]) * strides[d];
  return at;
}

}  // namespace

uint64_t Box::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

Box Intersect(const Box& a, const Box& b) {
  RTFT_CHECK(a.shape.size() == b.shape.size() && a.offset.size() == a.shape.size() &&
             b.offset.size() == b.shape.size());
  Box out;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    out.offset.push_back(lo);
    out.shape.push_back(std::max<int64_t>(hi - lo, 0));
  }
  return out;
}

uint64_t CopyRegion(const void* src, const Box& src_box, void* dst, const Box& dst_box,
                    const Box& region, size_t element_size) {
  const int rank = static_cast<int>(region.shape.size());
  RTFT_CHECK(static_cast<int>(src_box.shape.size()) == rank &&
             static_cast<int>(dst_box.shape.size()) == rank);
  const uint64_t total = region.elements();
  if (total == 0) return 0;

  // Dimensions after `inner` are whole on both sides, so [inner, rank) is one contiguous run.
  auto whole = [&](int d) {
    return region.shape[d] == src_box.shape[d] && region.shape[d] == dst_box.shape[d];
  };
  int inner = rank - 1;
  while (inner > 0 && whole(inner)) --inner;
  uint64_t run = 1;
  for (int d = std::max(inner, 0); d < rank; ++d) run *= static_cast<uint64_t>(region.shape[d]);
  const size_t run_bytes = run * element_size;

  const std::vector<uint64_t> src_strides = Strides(src_box.shape);
  const std::vector<uint64_t> dst_strides = Strides(dst_box.shape);
  std::vector<int64_t> index(rank, 0);  // position inside `region`; dims >= inner stay 0
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  for (uint64_t copied = 0; copied < total; copied += run) {
    std::memcpy(to + Linear(dst_box, dst_strides, region, index) * element_size,
                from + Linear(src_box, src_strides, region, index) * element_size, run_bytes);
    // Odometer over the outer dimensions [0, inner).
    for (int d = inner - 1; d >= 0; --d) {
      if (++index[d] < region.shape[d]) break;
      index[d] = 0;
    }
  }
  return total;
}

}  // namespace rtft
