#include "protect/l3_views.h"

#include <algorithm>

namespace rtft::protect {
namespace {

TensorDesc Slice(const TensorDesc& t, const char* data, std::vector<int64_t> shape,
                 std::vector<int64_t> global, std::vector<int64_t> offset) {
  TensorDesc d;
  d.name = t.name;
  d.dtype = t.dtype;
  d.shape = std::move(shape);
  d.data = const_cast<char*>(data);
  d.memory = MemoryKind::kHost;
  d.shard.global_shape = std::move(global);
  d.shard.offset = std::move(offset);
  return d;
}

}  // namespace

AreaView::AreaView(const Layout& layout, const char* replicated_area, const char* changing,
                   std::vector<ShardBytes> shards, std::string objects, int rank, int world)
    : layout_(layout),
      area_(replicated_area),
      changing_(changing),
      shards_(std::move(shards)),
      objects_(std::move(objects)),
      rank_(rank),
      world_(world) {}

Status AreaView::Describe(StateDescription* out) const {
  for (const Entry& e : layout_.replicated) {
    const TensorDesc& t = e.tensor;
    // One that compute changes may differ per rank between steps (BatchNorm's running statistics
    // under DDP, which broadcasts rank 0's at the next forward): the group's first rank writes
    // its own whole (from its replica when it is the rank lost), never rows of several ranks'.
    const bool changing = t.changed_in_compute && !t.shard.sharded();
    const char* at = changing ? changing_ + (e.offset - layout_.replica_begin()) : area_ + e.offset;
    if (t.shape.empty() || changing) {
      if (rank_ == 0)
        out->tensors.push_back(Slice(t, at, t.shape,
                                     t.shape.empty() ? std::vector<int64_t>{} : t.shape,
                                     std::vector<int64_t>(t.shape.size(), 0)));
      continue;
    }
    // Each rank of the group writes its share of the rows; a shard the group shares (HSDP's)
    // writes them at the shard's place in its global tensor.
    const EvenSplit rows = SplitEvenly(t.shape[0], world_, rank_);
    if (rows.count == 0) continue;
    const size_t row_bytes = e.bytes / t.shape[0];
    const bool shard = t.shard.sharded();
    std::vector<int64_t> shape = t.shape;
    std::vector<int64_t> offset = shard ? t.shard.offset : std::vector<int64_t>(t.shape.size(), 0);
    shape[0] = rows.count;
    offset[0] += rows.offset;
    out->tensors.push_back(Slice(t, area_ + e.offset + rows.offset * row_bytes, shape,
                                 shard ? t.shard.global_shape : t.shape, offset));
  }
  for (const ShardBytes& b : shards_)
    out->tensors.push_back(
        Slice(*b.tensor, b.data, b.box.shape, b.tensor->shard.global_shape, b.box.offset));
  const std::string objects = objects_;
  out->objects.push_back(
      {kObjectsName, [objects] { return StatusOr<std::string>(objects); }, nullptr});
  return Status::Ok();
}

Status LiveView::Describe(StateDescription* out) const {
  for (const Entry& e : layout_.replicated) {
    TensorDesc d = e.tensor;
    if (!d.shape.empty() && !d.shard.sharded()) {
      d.shard.global_shape = d.shape;
      d.shard.offset.assign(d.shape.size(), 0);
    }
    out->tensors.push_back(d);
  }
  for (const Entry& e : layout_.sharded) out->tensors.push_back(e.tensor);
  std::string* objects = objects_;
  out->objects.push_back({kObjectsName, nullptr, [objects](const std::string& b) {
                            *objects = b;
                            return Status::Ok();
                          }});
  return Status::Ok();
}

AreaView OwnAreaView(const Layout& layout, const char* area, uint64_t object_bytes, int rank,
                     int world) {
  std::vector<ShardBytes> shards;
  for (const Entry& e : layout.sharded)
    shards.push_back({&e.tensor, area + e.offset, {e.tensor.shard.offset, e.tensor.shape}});
  return AreaView(layout, area, area + layout.replica_begin(), std::move(shards),
                  std::string(area + layout.objects_begin, object_bytes), rank, world);
}

StatusOr<AreaView> ReplicaAreaView(const Layout& layout, const ShardTable& table,
                                   const char* replicated_area, const char* replica,
                                   uint64_t replica_bytes, int lost) {
  if (lost < 0 || lost >= table.world())
    return Status::Internal("no shard coordinates for rank " + std::to_string(lost));
  std::vector<ShardBytes> shards;
  size_t at = layout.replica_shards_at();  // its buffers come first
  for (size_t i = 0; i < layout.sharded.size(); ++i) {
    const Entry& e = layout.sharded[i];
    const Box& box = table.at(lost, i);
    shards.push_back({&e.tensor, replica + at, box});
    at = AlignUp(at + box.elements() * DTypeSize(e.tensor.dtype));
  }
  if (at > replica_bytes)
    return Status::DataLoss("rank " + std::to_string(lost) + "'s replica is short");
  return AreaView(layout, replicated_area, replica, std::move(shards),
                  std::string(replica + at, replica_bytes - at), lost, table.world());
}

}  // namespace rtft::protect
