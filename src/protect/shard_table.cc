#include "protect/shard_table.h"

namespace rtft::protect {

uint64_t Box::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

size_t ShardTable::RowLength(const Layout& layout) {
  size_t n = 0;
  for (const Entry& e : layout.sharded) n += 2 * e.tensor.shard.global_shape.size();
  return n;
}

std::vector<int64_t> ShardTable::Row(const Layout& layout) {
  std::vector<int64_t> row;
  row.reserve(RowLength(layout));
  for (const Entry& e : layout.sharded) {
    row.insert(row.end(), e.tensor.shard.offset.begin(), e.tensor.shard.offset.end());
    row.insert(row.end(), e.tensor.shape.begin(), e.tensor.shape.end());
  }
  return row;
}

StatusOr<ShardTable> ShardTable::FromRows(const Layout& layout, const std::vector<int64_t>& rows,
                                          int world) {
  const size_t length = RowLength(layout);
  if (world <= 0 || rows.size() != length * static_cast<size_t>(world))
    return Status::DataLoss("a shard table of " + std::to_string(rows.size()) + " values for " +
                            std::to_string(world) + " ranks of " + std::to_string(length));
  ShardTable t;
  t.boxes_.assign(world, std::vector<Box>(layout.sharded.size()));
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < layout.sharded.size(); ++i) {
      const std::vector<int64_t>& global = layout.sharded[i].tensor.shard.global_shape;
      const size_t rank = global.size();
      Box& b = t.boxes_[r][i];
      b.offset.assign(rows.begin() + at, rows.begin() + at + rank);
      b.shape.assign(rows.begin() + at + rank, rows.begin() + at + 2 * rank);
      at += 2 * rank;
      for (size_t d = 0; d < rank; ++d)
        if (b.offset[d] < 0 || b.shape[d] < 0 || b.offset[d] > global[d] ||
            b.shape[d] > global[d] - b.offset[d])
          return Status::DataLoss("rank " + std::to_string(r) + "'s shard of '" +
                                  layout.sharded[i].tensor.name +
                                  "' lies outside its global tensor");
    }
  }
  return t;
}

std::vector<int64_t> ShardTable::Rows() const {
  std::vector<int64_t> rows;
  for (const auto& rank : boxes_)
    for (const Box& b : rank) {
      rows.insert(rows.end(), b.offset.begin(), b.offset.end());
      rows.insert(rows.end(), b.shape.begin(), b.shape.end());
    }
  return rows;
}

}  // namespace rtft::protect
