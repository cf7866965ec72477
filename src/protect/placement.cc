// Where every rank's shards are (the shard table), gathered once per epoch on the replication
// communicator, and the check that every rank describes the same state.
#include <algorithm>

#include "protect/parts.h"

namespace rtft::protect {
namespace {

// The most bytes `rank`'s replica can take: its shards as its table row says, and the objects'
// room (the same on every rank).
uint64_t ReplicaLimit(const Layout& layout, const ShardTable& table, int rank) {
  // Its replicated tensors that compute changes (laid out as this rank's), then its shards.
  uint64_t bytes = layout.replica_shards_at();
  for (size_t i = 0; i < layout.sharded.size(); ++i)
    bytes =
        AlignUp(bytes + table.at(rank, i).elements() * DTypeSize(layout.sharded[i].tensor.dtype));
  return bytes + layout.object_capacity;
}

}  // namespace

// The table covers this rank's data-parallel group (the ranks whose state the replicas carry):
// its positions are the ring's.
Status Held::PlaceShards(const Epoch& epoch) {
  const GridPlace me = epoch.grid.of(epoch.train->rank());
  const int group = me.data, position = me.d;
  const std::vector<int64_t> mine = ShardTable::Row(layout);
  std::vector<int64_t> rows = mine;
  if (group > 1) {
    if (!epoch.replicator)
      return Status::Internal("placing shards without a replication communicator");
    const uint64_t hash = layout.shared_hash;
    RTFT_RETURN_IF_ERROR(epoch.replicator->Call([&](Communicator* c) -> Status {
      // Every rank must describe the same state before the rows (of its length) can be gathered.
      std::vector<uint64_t> hashes(group);
      RTFT_RETURN_IF_ERROR(c->AllGather(&hash, hashes.data(), 1, DType::kInt64));
      for (int r = 0; r < group; ++r)
        if (hashes[r] != hash)
          return Status::FailedPrecondition("data-parallel rank " + std::to_string(r) +
                                            " describes another protected state "
                                            "than data-parallel rank " +
                                            std::to_string(position) +
                                            " of its group (names, types or global shapes differ)");
      rows.resize(mine.size() * group);
      if (mine.empty()) return Status::Ok();
      return c->AllGather(mine.data(), rows.data(), mine.size(), DType::kInt64);
    }));
  }
  RTFT_ASSIGN_OR_RETURN(table, ShardTable::FromRows(layout, rows, group));
  rank = epoch.train->rank();
  world = epoch.train->world_size();
  if (epoch.replicator)
    epoch.replicator->Expect(ReplicaLimit(layout, table, (position + group - 1) % group));
  return Status::Ok();
}

// For a shrink: every rank gets the old world's shard table from one that has it (a process
// restarted in the middle of a shrink lost its own).
Status Held::ShareOldTable(const Epoch& epoch, int old_world) {
  const int32_t have = table.world() == old_world ? 1 : 0;
  const int group = epoch.replicator ? epoch.replicator->world_size() : 1;
  if (group == 1 || layout.sharded.empty()) {
    if (have || layout.sharded.empty()) return Status::Ok();
    return Status::Internal("no shard table of the old world of " + std::to_string(old_world) +
                            " ranks");
  }
  std::vector<int64_t> rows = have ? table.Rows() : std::vector<int64_t>();
  RTFT_RETURN_IF_ERROR(epoch.replicator->Call([&](Communicator* c) -> Status {
    std::vector<int32_t> all(group);
    RTFT_RETURN_IF_ERROR(c->AllGather(&have, all.data(), 1, DType::kInt32));
    const auto src = std::find(all.begin(), all.end(), 1);
    if (src == all.end()) return Status::DataLoss("no rank knows the old world's shards");
    if (std::find(all.begin(), all.end(), 0) == all.end()) return Status::Ok();  // all have it
    rows.resize(ShardTable::RowLength(layout) * old_world);
    return c->Broadcast(rows.data(), rows.size(), DType::kInt64,
                        static_cast<int>(src - all.begin()));
  }));
  if (have) return Status::Ok();
  RTFT_ASSIGN_OR_RETURN(table, ShardTable::FromRows(layout, rows, old_world));
  return Status::Ok();
}

}  // namespace rtft::protect
