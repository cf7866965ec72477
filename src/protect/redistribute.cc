// The shrink's transfer (docs/protect.md, "Shrink"; on a grid within each data-parallel group, its
// positions for ranks: "3D layouts"): for each sharded tensor, each new rank d and
// each old rank q (every rank in that one order, so no two wait on each other), the rows of q's
// old shard that d's new shard covers go from where q's bytes are (q's own L1 when q survived,
// its replica on its old right neighbour when not) to d, point to point on the replication
// communicator.
#include <algorithm>
#include <cstring>

#include "protect/recovery.h"

namespace rtft::protect {
namespace {

// What one shrink's transfer moves, as every rank sees it.
struct Moves {
  const Layout& target;                      // the new shards, this rank's memory
  const ShardTable& old;                     // every old rank's boxes
  std::vector<int> source;                   // per old rank: the new rank that holds its bytes
  std::vector<std::vector<const char*>> at;  // [old rank][tensor]: its bytes, on their source
  int me = 0;
  int world = 1;
};

// The rows of one tensor, old shard by old shard, to the new ranks.
Status MoveTensor(Communicator* c, const Moves& m, size_t i, uint64_t* moved) {
  const TensorDesc& t = m.target.sharded[i].tensor;
  const std::vector<int64_t>& global = t.shard.global_shape;
  uint64_t row = DTypeSize(t.dtype);
  for (size_t d = 1; d < global.size(); ++d) row *= static_cast<uint64_t>(global[d]);
  char* mine = static_cast<char*>(t.data);
  for (int d = 0; d < m.world; ++d) {
    const EvenSplit to = SplitEvenly(global[0], m.world, d);
    for (int q = 0; q < m.old.world(); ++q) {
      const Box& from = m.old.at(q, i);
      const int64_t lo = std::max(from.offset[0], to.offset);
      const int64_t hi = std::min(from.offset[0] + from.shape[0], to.offset + to.count);
      if (lo >= hi) continue;
      const size_t bytes = static_cast<size_t>(hi - lo) * row;
      const int src = m.source[q];
      const char* out = src == m.me ? m.at[q][i] + (lo - from.offset[0]) * row : nullptr;
      char* in = d == m.me ? mine + (lo - to.offset) * row : nullptr;
      if (src == m.me && d == m.me) {
        std::memcpy(in, out, bytes);
      } else if (src == m.me) {
        RTFT_RETURN_IF_ERROR(c->Send(out, bytes, DType::kUInt8, d));
        *moved += bytes;
      } else if (d == m.me) {
        RTFT_RETURN_IF_ERROR(c->Recv(in, bytes, DType::kUInt8, src));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status Shrink::Redistribute(const Layout& resized) {
  const RecoveryPlan& plan = plan_;
  const std::vector<int>& new_of_old = new_of_old_;
  const Layout& layout = p_.held->layout;
  const ShardTable& table = p_.held->table;
  Snapshot* l1 = p_.held->l1.get();
  ReplicaStore* l2 = p_.held->l2.get();
  const int old_world = static_cast<int>(new_of_old.size());
  if (table.world() != old_world)
    return Status::Internal("a shard table of " + std::to_string(table.world()) +
                            " ranks for an old world of " + std::to_string(old_world));
  // Positions in the data-parallel group: the ranks on a flat layout.
  const GridPlace at = epoch_.grid.of(epoch_.train->rank());
  Moves m{resized, table, std::vector<int>(old_world, -1), {}, at.d, at.data};
  std::vector<int> holder_of(old_world, -1);
  for (size_t k = 0; k < plan.needy.size(); ++k) holder_of[plan.needy[k]] = plan.holder[k];
  for (int q = 0; q < old_world; ++q) {
    const int h = new_of_old[q] >= 0 ? q : holder_of[q];
    if (h < 0 || new_of_old[h] < 0)
      return Status::Internal("the shrink plan places rank " + std::to_string(q) +
                              "'s state nowhere");
    m.source[q] = new_of_old[h];
  }
  // On this rank: its own old shards in its L1, and each lost rank's whose replica it holds (its
  // shards 4 KiB aligned in declaration order, as that rank laid them out).
  m.at.assign(old_world, std::vector<const char*>(layout.sharded.size(), nullptr));
  for (int q = 0; q < old_world; ++q) {
    if (m.source[q] != m.me) continue;
    if (new_of_old[q] == m.me) {
      for (size_t i = 0; i < layout.sharded.size(); ++i)
        m.at[q][i] = l1->payload(plan.step) + layout.sharded[i].offset;
      continue;
    }
    const auto held = l2->Find(q, plan.step);
    size_t off = layout.replica_shards_at();  // its buffers come first
    for (size_t i = 0; i < layout.sharded.size(); ++i) {
      m.at[q][i] = l2->Data(plan.step) + off;
      off = AlignUp(off + table.at(q, i).elements() * DTypeSize(layout.sharded[i].tensor.dtype));
    }
    if (!held || off > held->bytes)
      return Status::DataLoss("this rank's replica of rank " + std::to_string(q) + "'s step " +
                              std::to_string(plan.step) + " is missing or short");
  }
  auto move_all = [&](Communicator* c) -> Status {
    for (size_t i = 0; i < resized.sharded.size(); ++i)
      RTFT_RETURN_IF_ERROR(MoveTensor(c, m, i, &info_.bytes_moved));
    return Status::Ok();
  };
  if (m.world == 1) return move_all(nullptr);  // every byte is this rank's own
  if (!epoch_.replicator) return Status::Internal("a shrink without a replication communicator");
  return epoch_.replicator->Call(move_all);
}

}  // namespace rtft::protect
