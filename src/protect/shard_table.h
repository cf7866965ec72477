// Where every rank's shards are: for each rank of the world the state is laid out for and each
// sharded tensor, the box (offset and shape in the global tensor) it holds. Gathered once per
// epoch; the L3 writer needs a lost rank's boxes to write its file from its replica, and a shrink
// needs every old rank's boxes to move the bytes to the new shards.
#pragma once

#include <cstdint>
#include <vector>

#include "protect/layout.h"

namespace rtft::protect {

struct Box {
  std::vector<int64_t> offset, shape;
  uint64_t elements() const;
};

class ShardTable {
 public:
  ShardTable() = default;
  // This rank's row: for each sharded tensor, its offset then its shape (the global tensor's rank
  // of each, which the layout's shared hash makes equal on every rank).
  static std::vector<int64_t> Row(const Layout& layout);
  static size_t RowLength(const Layout& layout);
  // The table from every rank's row, concatenated in rank order; rows from other processes are
  // input from outside: a box outside its global tensor is kDataLoss.
  static StatusOr<ShardTable> FromRows(const Layout& layout, const std::vector<int64_t>& rows,
                                       int world);

  int world() const { return static_cast<int>(boxes_.size()); }
  bool empty() const { return boxes_.empty(); }
  const Box& at(int rank, size_t tensor) const { return boxes_[rank][tensor]; }
  // The flat rows again (to send the table to a rank that lacks it).
  std::vector<int64_t> Rows() const;

 private:
  std::vector<std::vector<Box>> boxes_;  // [rank][sharded tensor]
};

}  // namespace rtft::protect
