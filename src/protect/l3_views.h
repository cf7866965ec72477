// What the checkpoint engine sees of the protected state (docs/protect.md, "Levels"): one rank's
// step as L3 writes it (its rows of every replicated tensor, so the files hold one copy of the
// parameters, not one per rank; its shards with their coordinates; its serialized objects as one
// object), and the live state as an L3 restore fills it.
#pragma once

#include <string>
#include <vector>

#include "protect/layout.h"
#include "protect/shard_table.h"
#include "rtft/state.h"

namespace rtft::protect {

// The L3 object that holds the serialized objects of a step.
constexpr const char* kObjectsName = "protect.objects";

// One rank's shard of a sharded tensor, wherever its bytes are (L1, or an L2 replica).
struct ShardBytes {
  const TensorDesc* tensor = nullptr;  // name, type and global shape
  const char* data = nullptr;
  Box box;
};

class AreaView final : public StateProvider {
 public:
  // `replicated_area`: any rank's L1 payload of the step (the replicated tensors are equal
  // everywhere); `rank` of `world` writes the rows it owns of each. `changing`: where `rank`'s
  // replicated tensors that compute changes start (its replica range's first bytes).
  AreaView(const Layout& layout, const char* replicated_area, const char* changing,
           std::vector<ShardBytes> shards, std::string objects, int rank, int world);
  Status Describe(StateDescription* out) const override;

 private:
  const Layout& layout_;
  const char* area_;
  const char* changing_;
  std::vector<ShardBytes> shards_;
  std::string objects_;
  int rank_, world_;
};

// The application's own state, as Restore fills it: every replicated tensor whole (assembled
// from every rank's rows), this rank's shards, and the objects' blob into `objects`.
class LiveView final : public StateProvider {
 public:
  LiveView(const Layout& layout, std::string* objects) : layout_(layout), objects_(objects) {}
  Status Describe(StateDescription* out) const override;

 private:
  const Layout& layout_;
  std::string* objects_;
};

// This rank's own step from its L1 area, and rank `lost`'s from the replica this rank holds of it
// (its shards laid out as that rank laid them out: 4 KiB aligned in declaration order, then its
// objects; kDataLoss when the replica is shorter than its shard table says).
AreaView OwnAreaView(const Layout& layout, const char* area, uint64_t object_bytes, int rank,
                     int world);
StatusOr<AreaView> ReplicaAreaView(const Layout& layout, const ShardTable& table,
                                   const char* replicated_area, const char* replica,
                                   uint64_t replica_bytes, int lost);

}  // namespace rtft::protect
