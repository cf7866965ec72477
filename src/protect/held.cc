// What a rank holds across epochs (parts.h): the described state and its layout, the memory
// files of L1 and L2, and the world they are laid out for.
#include <utility>
#include <vector>

#include "core/logging.h"
#include "protect/parts.h"
#include "protect/shm_file.h"

namespace rtft::protect {

Status Held::Open(const Runtime& rt, const Settings& settings) {
  RTFT_ASSIGN_OR_RETURN(dir, ProtectDir(settings.options.shm_dir, &owned_dir));
  built_world = rt.info().world_size;
  if (rt.info().role == RuntimeRole::kRestarted) RTFT_RETURN_IF_ERROR(AdoptOldLayout(rt, settings));
  if (!l1) {
    RTFT_ASSIGN_OR_RETURN(l1, Snapshot::Open(dir, layout));
  }
  RTFT_ASSIGN_OR_RETURN(l2, ReplicaStore::Open(dir));
  return Status::Ok();
}

// A process restarted in the middle of a shrink's recovery finds its snapshot laid out for the
// old world, its shards sized for it, while the application described shards sized for the new
// one: opened with the described layout, the snapshot would be thrown away. Rebuilt from the
// sizes the file records, the old layout opens it, and this rank takes part in the shrink as the
// survivor it is (docs/protect.md, "Shrink"). Until the shrink lays the state out again, the
// sharded entries describe the snapshot only (Shards::kOldWorldSnapshot).
Status Held::AdoptOldLayout(const Runtime& rt, const Settings& settings) {
  const std::optional<Snapshot::FileLayout> file = Snapshot::Peek(dir);
  if (!file || file->layout_hash == layout.hash ||
      file->sharded_bytes.size() != layout.sharded.size() || layout.sharded.empty())
    return Status::Ok();
  static char snapshot_only;  // a non-null address that is never read or written
  Layout old = layout;
  for (size_t i = 0; i < old.sharded.size(); ++i) {
    TensorDesc& t = old.sharded[i].tensor;
    const uint64_t bytes = file->sharded_bytes[i], size = DTypeSize(t.dtype);
    if (size == 0 || bytes % size != 0) return Status::Ok();
    t.shape = {static_cast<int64_t>(bytes / size)};  // a flat view: only its bytes are used
    t.data = &snapshot_only;
  }
  if (!old.Finish(settings.ObjectRoom()).ok() || old.hash != file->layout_hash) return Status::Ok();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> snapshot, Snapshot::Open(dir, old));
  const std::vector<uint64_t> steps = snapshot->CompleteSteps();
  if (steps.empty()) return Status::Ok();  // nothing worth keeping: the described layout it is
  const AreaHeader* h = snapshot->header(steps.front());
  // Only a world that changed explains another layout; anything else starts over, as before.
  if (h->world <= 0 || h->rank < 0 || h->rank >= h->world || h->world == rt.current().world_size)
    return Status::Ok();
  layout = std::move(old);
  l1 = std::move(snapshot);
  rank = h->rank;
  world = h->world;
  shards = Shards::kOldWorldSnapshot;
  RTFT_LOG(kWarn, kLogRuntime) << "protect: this process's snapshot is laid out for rank " << rank
                               << " of " << world
                               << " ranks (restarted while the job shrank): kept for the shrink";
  return Status::Ok();
}

RankState Held::Mine(int rank_now) const {
  RankState mine;
  mine.rank = rank_now;
  mine.was = rank;
  mine.was_world = world;
  mine.layout_hash = layout.shared_hash;
  mine.l1 = l1->CompleteSteps();
  for (const auto& h : l2->Complete()) mine.l2.emplace_back(h.owner, h.step);
  mine.untouched_world = untouched ? built_world : 0;
  return mine;
}

Status Held::Restored(uint64_t step, bool sharded) {
  untouched = false;
  RTFT_RETURN_IF_ERROR(l1->Restore(step, sharded));
  return state->Restored().Annotate("after restoring step " + std::to_string(step));
}

Status Held::Relayout(Layout new_layout, std::shared_ptr<StateProvider> new_state) {
  layout = std::move(new_layout);
  state = std::move(new_state);
  shards = Shards::kApplication;
  RTFT_RETURN_IF_ERROR(l1->Relayout(dir, layout));
  l2->Clear();
  return Status::Ok();
}

}  // namespace rtft::protect
