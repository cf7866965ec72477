// The protected state as every level lays it out (docs/protect.md, "Layout"): the tensors and
// objects that the application's StateProvider describes, in one payload of
// [replicated tensors][replicated tensors that compute changes][sharded tensors][objects], each
// tensor 4 KiB aligned. The L1 snapshot copies it, the L2 replica sends its range from the first
// tensor that compute changes (each rank's own between steps) to the end of the objects, and the
// L3 writer hands slices of it to the checkpoint engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rtft/state.h"

namespace rtft::protect {

constexpr size_t kAlign = 4096;
inline size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Entry {
  TensorDesc tensor;
  size_t bytes = 0;
  size_t offset = 0;  // in an area's payload
};

struct Layout {
  std::vector<Entry> replicated;  // no shard coordinates: identical on every rank
  std::vector<Entry> sharded;     // this rank's shard of a global tensor
  std::vector<ObjectDesc> objects;
  // The replicated tensors that compute does not change come first, [0, compared_end): what the
  // cross-check compares (docs/protect.md, "Silent data corruption") and what a rank that lost
  // its state is fed from a peer; those it changes (a module's buffers, which may differ per rank
  // between steps: TensorDesc::changed_in_compute) follow, up to shard_begin, and start the L2
  // replica's range: each rank's own, as its shards are.
  size_t compared_end = 0;
  size_t shard_begin = 0;
  size_t objects_begin = 0;
  size_t object_capacity = 0;
  size_t payload_bytes = 0;  // objects_begin + object_capacity, aligned
  // Of every name, type, size and kind: an L1 file of another layout is not this state's.
  uint64_t hash = 0;
  // Of what every rank of the job shares: the replicated tensors' names, types and shapes, the
  // sharded tensors' names, types and global shapes, the objects' names. Ranks that disagree on
  // it hold nothing the others can use.
  uint64_t shared_hash = 0;

  // Lays out `state` (host or device tensors) with room for `object_capacity` bytes of objects.
  static StatusOr<Layout> Build(const StateDescription& state, size_t object_capacity);
  // Offsets and hashes again, after tensors were replaced (a shrink's new shards).
  Status Finish(size_t object_capacity);
  // Replica range: the replicated tensors that compute changes, the sharded tensors and the
  // objects, [replica_begin(), objects_begin + used).
  size_t replica_begin() const { return compared_end; }
  // Where the first shard sits in a replica: after the replicated tensors that compute changes.
  size_t replica_shards_at() const { return shard_begin - replica_begin(); }
  size_t replica_bytes(size_t object_bytes) const {
    return objects_begin - replica_begin() + object_bytes;
  }
};

// Serialized objects: for each, u32 name length, name, u64 data length, data.
StatusOr<std::string> SerializeObjects(const std::vector<ObjectDesc>& objects);
// Hands each object its bytes; anything that does not match the declared objects is kDataLoss.
Status DeserializeObjects(const std::vector<ObjectDesc>& objects, const char* data, size_t bytes);

}  // namespace rtft::protect
