// N-dimensional boxes of a row-major tensor and copies between them: how resharding restores a
// tensor from saved shards that cut the global tensor differently than the restoring ranks do.
// Used by Restore; unit-tested in tests/checkpoint/reshard_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rtft {

// The elements [offset[d], offset[d] + shape[d]) of each dimension d of a global tensor; a
// rank-0 box is the single element of a scalar.
struct Box {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;

  uint64_t elements() const;
  bool operator==(const Box& o) const { return offset == o.offset && shape == o.shape; }
};

// The common part of two boxes of the same rank; a box with no elements when they do not meet.
Box Intersect(const Box& a, const Box& b);

// Copies the elements of `region` (which must lie inside both `src_box` and `dst_box`) from
// `src`, the row-major contents of src_box, to `dst`, the row-major contents of dst_box.
// Trailing dimensions that both sides hold whole are copied as one run. Returns the number of
// elements copied.
uint64_t CopyRegion(const void* src, const Box& src_box, void* dst, const Box& dst_box,
                    const Box& region, size_t element_size);

}  // namespace rtft
