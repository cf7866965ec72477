// Shrink (docs/protect.md, "Shrink"): no spare was left, the job goes on with fewer ranks,
// renumbered densely in their old order (on a tensor x pipeline grid, whole data-parallel
// replicas left, and all of the below happens per data-parallel group: "3D layouts"). Each sharded
// tensor's first dimension is split evenly over the new ranks (EvenShard); the survivors agree on a
// step whose state is complete (their own L1, and each lost rank's L2 replica on a survivor), the
// application describes its state again with shard buffers of the new sizes, and every row of every
// old shard moves from where it is (a survivor's L1, a holder's replica) to the new rank whose
// shard covers it. Replicated tensors and objects come back from each survivor's own L1.
#include <algorithm>
#include <cstring>

#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/recovery.h"

namespace rtft::protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool SameTensor(const TensorDesc& a, const TensorDesc& b) {
  return a.name == b.name && a.dtype == b.dtype;
}

std::string Dims(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// What a resized layout `l` describes that it should not, against the layout before `was` and
// the new shards `place` gives: the first difference, named; empty when none.
std::string Differs(const Layout& l, const Layout& was, const ShrinkPlace& place) {
  const auto count = [](const char* what, size_t got, size_t want) {
    return std::to_string(got) + " " + what + " where " + std::to_string(want) + " were wanted";
  };
  if (l.replicated.size() != was.replicated.size())
    return count("replicated tensors", l.replicated.size(), was.replicated.size());
  if (l.sharded.size() != place.shards.size())
    return count("sharded tensors", l.sharded.size(), place.shards.size());
  if (l.objects.size() != was.objects.size())
    return count("objects", l.objects.size(), was.objects.size());
  for (size_t i = 0; i < l.replicated.size(); ++i) {
    const TensorDesc &t = l.replicated[i].tensor, &want = was.replicated[i].tensor;
    if (!SameTensor(t, want) || t.shape != want.shape ||
        t.shard.replicated != want.shard.replicated || t.shard.offset != want.shard.offset ||
        t.shard.global_shape != want.shard.global_shape)
      return "replicated tensor '" + t.name + "' (" + DTypeName(t.dtype) + " " + Dims(t.shape) +
             (t.shard.replicated ? ", a shared shard" : "") + ") where '" + want.name + "' (" +
             DTypeName(want.dtype) + " " + Dims(want.shape) +
             (want.shard.replicated ? ", a shared shard" : "") + ") was";
  }
  for (size_t i = 0; i < l.sharded.size(); ++i) {
    const TensorDesc &t = l.sharded[i].tensor, &want = place.shards[i];
    if (!SameTensor(t, want) || t.shape != want.shape || t.shard.offset != want.shard.offset ||
        t.shard.global_shape != want.shard.global_shape)
      return "shard '" + t.name + "' (" + DTypeName(t.dtype) + " " + Dims(t.shape) + " at " +
             Dims(t.shard.offset) + " of " + Dims(t.shard.global_shape) + ") where '" + want.name +
             "' (" + DTypeName(want.dtype) + " " + Dims(want.shape) + " at " +
             Dims(want.shard.offset) + " of " + Dims(want.shard.global_shape) + ") was";
  }
  for (size_t i = 0; i < l.objects.size(); ++i)
    if (l.objects[i].name != was.objects[i].name)
      return "object '" + l.objects[i].name + "' where '" + was.objects[i].name + "' was";
  return "";
}

}  // namespace

Status Shrink::CanShrinkGrid(int world) const {
  const Grid& wanted = p_.settings->options.grid;
  const int64_t unit = int64_t{wanted.tensor} * wanted.pipeline;
  const std::string grid = std::to_string(wanted.tensor) + "x" + std::to_string(wanted.pipeline);
  if (!wanted.ranks.empty())
    return Status::Unimplemented(
        "the job shrank, and a shrink of a grid with an explicit rank "
        "map (Grid::ranks) is not built: run with --on-spares-exhausted "
        "checkpoint-and-exit");
  if (world % unit != 0)
    return Status::FailedPrecondition(
        "the job shrank to " + std::to_string(world) + " ranks, which no " + grid +
        " layout fills: dp-launch must drop whole data-parallel replicas (run it with --grid " +
        grid + ")");
  return Status::Ok();
}

// On a grid the plan is the world's (one step for every group); this rank moves its own
// data-parallel group's part, in positions of its ring (docs/protect.md, "3D layouts"). The
// decision is the agreement leader's (DecideShrink), the same on every rank.
Recovered Shrink::Run(uint64_t epoch, const ShrinkDecision& decision, int world,
                      Clock::time_point t0, std::optional<uint64_t> l3_version) {
  t0_ = t0;
  StatusOr<uint64_t> step = Into(epoch, decision, world, l3_version);
  return Recovered{std::move(epoch_), std::move(info_), std::move(step), in_memory_};
}

StatusOr<uint64_t> Shrink::Into(uint64_t epoch, const ShrinkDecision& decision, int world,
                                std::optional<uint64_t> l3_version) {
  const Grid& wanted = p_.settings->options.grid;
  const bool on_grid = wanted.tensor > 1 || wanted.pipeline > 1;
  if (on_grid) RTFT_RETURN_IF_ERROR(CanShrinkGrid(world));
  if (!on_grid) plan_ = decision.plan;
  info_.epoch = epoch;
  info_.agree_s = Since(t0_);
  RTFT_LOG(kWarn, kLogRuntime) << "the job shrank from " << decision.old_size << " to " << world
                               << " ranks (this rank was " << p_.held->rank << ", is now "
                               << p_.rt->current().rank << ")";
  RTFT_RETURN_IF_ERROR(epoch_.Build(p_, epoch));
  if (epoch_.train->world_size() != world)
    return Status::Aborted("the job moved on from epoch " + std::to_string(epoch));
  new_of_old_ = decision.new_of_old;
  if (on_grid && decision.grid.ok) {
    if (decision.grid.tensor != wanted.tensor || decision.grid.pipeline != wanted.pipeline)
      return Status::Internal("the shrink was decided for another tensor x pipeline layout");
    const GridPlace me = epoch_.grid.of(epoch_.train->rank());
    plan_ = GroupShrinkPart(decision.grid, me.t, me.p, &new_of_old_);
  } else if (on_grid) {
    plan_.why = decision.grid.why;
  }
  RTFT_ASSIGN_OR_RETURN(Resized resized, Resize(NewPlace(world, epoch_.train->rank())));
  if (plan_.ok) return FromMemory(epoch, std::move(resized));
  RTFT_LOG(kError, kLogRuntime) << "shrink into epoch " << epoch << ": " << plan_.why
                                << "; falling back to "
                                << (l3_version
                                        ? "L3 version " + std::to_string(*l3_version)
                                        : std::string("L3, which holds no complete version"));
  if (!p_.l3->enabled())
    return Status::DataLoss("the job shrank and " + plan_.why +
                            "; there is no L3 checkpoint directory to fall back to");
  RTFT_RETURN_IF_ERROR(Relayout(std::move(resized)));
  return RestoreL3(p_, &epoch_, epoch, &info_, l3_version);
}

StatusOr<uint64_t> Shrink::FromMemory(uint64_t epoch, Resized resized) {
  const RecoveryPlan& plan = plan_;
  Held* held = p_.held;
  // The rows move straight into the new shards' memory, which must be the host's.
  for (const Entry& e : resized.layout.sharded)
    if (e.tensor.memory == MemoryKind::kDevice)
      return Status::Unimplemented("a shrink of shards in device memory ('" + e.tensor.name +
                                   "'): run with --on-spares-exhausted checkpoint-and-exit");
  // Replicated tensors and objects from this survivor's own snapshot, then the shards.
  RTFT_RETURN_IF_ERROR(held->l1->RestoreShared(plan.step, resized.layout));
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(held->ShareOldTable(epoch_, static_cast<int>(new_of_old_.size())));
  RTFT_RETURN_IF_ERROR(CheckRowSplit());
  info_.rebuild_s = Since(t0_);
  RTFT_RETURN_IF_ERROR(Redistribute(resized.layout));
  info_.transfer_s = Since(t0_);
  RTFT_RETURN_IF_ERROR(Relayout(std::move(resized)));
  RTFT_RETURN_IF_ERROR(held->state->Restored().Annotate("after the shrink's restore"));
  // The restored step, captured again in the new layout: the first step's capture is skipped and
  // the snapshot replicated to the new ring neighbour.
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(held->layout.objects));
  RTFT_RETURN_IF_ERROR(held->l1->Capture(plan.step, epoch, epoch_.train->rank(),
                                         epoch_.train->world_size(), objects,
                                         p_.settings->options.stream));
  info_.step = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  in_memory_ = true;
  RTFT_LOG(kWarn, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " with " << epoch_.train->world_size() << " ranks: the shards "
                               << "redistributed over " << epoch_.grid.data() << " of "
                               << new_of_old_.size() << " data-parallel ranks";
  return plan.step;
}

ShrinkPlace Shrink::NewPlace(int world, int rank) const {
  ShrinkPlace place;
  place.rank = rank;
  place.world_size = world;
  // Over the data-parallel group (the whole world when the layout is flat), in the new epoch's
  // grid.
  const GridPlace at = epoch_.grid.of(rank);
  for (const Entry& e : p_.held->layout.sharded)
    place.shards.push_back(
        EvenShard(e.tensor.name, e.tensor.dtype, e.tensor.shard.global_shape, at.data, at.d));
  return place;
}

// The application's state described again for `place`: the same tensors and objects, the shards
// where `place` puts them.
StatusOr<Shrink::Resized> Shrink::Resize(const ShrinkPlace& place) const {
  const Layout& layout = p_.held->layout;
  const std::string shrank = "the job shrank from " + std::to_string(p_.held->world) + " to " +
                             std::to_string(place.world_size) + " ranks";
  if (!p_.held->resize)
    return Status::FailedPrecondition(
        shrank + ", and the application gave Protector::Protect no ResizeState to lay its " +
        "state out again (or run with --on-spares-exhausted checkpoint-and-exit)");
  StatusOr<std::shared_ptr<StateProvider>> state = p_.held->resize(place);
  if (!state.ok()) return state.status().Annotate(shrank + ": ResizeState");
  if (!*state) return Status::InvalidArgument(shrank + ": ResizeState returned no state");
  StateDescription d;
  RTFT_RETURN_IF_ERROR((*state)->Describe(&d).Annotate(shrank));
  RTFT_ASSIGN_OR_RETURN(Layout l, Layout::Build(d, p_.settings->ObjectRoom()));
  const std::string differs = Differs(l, layout, place);
  if (!differs.empty())
    return Status::InvalidArgument(shrank + ": ResizeState described " + differs +
                                   " (the same tensors and objects as before, each sharded one "
                                   "with the shard of its ShrinkPlace)");
  return Resized{std::move(l), std::move(*state)};
}

// The old shards must split each tensor's first dimension (whole in every other) for their rows to
// move to the new shards; the old world's table says where each was.
Status Shrink::CheckRowSplit() const {
  const Layout& layout = p_.held->layout;
  const ShardTable& table = p_.held->table;
  for (size_t i = 0; i < layout.sharded.size(); ++i) {
    const std::vector<int64_t>& global = layout.sharded[i].tensor.shard.global_shape;
    std::vector<std::pair<int64_t, int64_t>> rows;
    bool whole = true;
    for (int q = 0; q < table.world(); ++q) {
      const Box& b = table.at(q, i);
      for (size_t d = 1; d < global.size(); ++d)
        whole = whole && b.offset[d] == 0 && b.shape[d] == global[d];
      if (b.shape[0] > 0) rows.emplace_back(b.offset[0], b.shape[0]);
    }
    std::sort(rows.begin(), rows.end());
    int64_t next = 0;  // the rows covered so far, in order, without a gap or an overlap
    for (const auto& [offset, count] : rows) {
      whole = whole && offset == next;
      next = offset + count;
    }
    if (!whole || next != global[0])
      return Status::FailedPrecondition(
          "the shards of '" + layout.sharded[i].tensor.name +
          "' do not split its first dimension between the ranks, so a shrink cannot lay them "
          "out again (run with --on-spares-exhausted checkpoint-and-exit)");
  }
  return Status::Ok();
}

Status Shrink::Relayout(Resized resized) {
  RTFT_RETURN_IF_ERROR(p_.held->Relayout(std::move(resized.layout), std::move(resized.state)));
  RTFT_RETURN_IF_ERROR(p_.held->PlaceShards(epoch_));
  return epoch_.OpenL3(p_);
}

}  // namespace rtft::protect
