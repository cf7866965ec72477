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
#include "protect/protector.h"

namespace rtft::protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool SameTensor(const TensorDesc& a, const TensorDesc& b) {
  return a.name == b.name && a.dtype == b.dtype;
}

}  // namespace

Status ProtectorImpl::CanShrinkGrid(const RuntimeInfo& now) const {
  const int64_t unit = int64_t{o_.grid.tensor} * o_.grid.pipeline;
  const std::string grid = std::to_string(o_.grid.tensor) + "x" + std::to_string(o_.grid.pipeline);
  if (!o_.grid.ranks.empty())
    return Status::Unimplemented(
        "the job shrank, and a shrink of a grid with an explicit rank "
        "map (Grid::ranks) is not built: run with --on-spares-exhausted "
        "checkpoint-and-exit");
  if (now.world_size % unit != 0)
    return Status::FailedPrecondition(
        "the job shrank to " + std::to_string(now.world_size) + " ranks, which no " + grid +
        " layout fills: dp-launch must drop whole data-parallel replicas (run it with --grid " +
        grid + ")");
  return Status::Ok();
}

// On a grid the plan is the world's (one step for every group); this rank moves its own
// data-parallel group's part, in positions of its ring (docs/protect.md, "3D layouts"). The
// decision is the agreement leader's (DecideShrink), the same on every rank.
StatusOr<uint64_t> ProtectorImpl::Shrink(uint64_t epoch, const ShrinkDecision& decision, int world,
                                         Clock::time_point t0) {
  const bool on_grid = o_.grid.tensor > 1 || o_.grid.pipeline > 1;
  RecoveryPlan plan;
  if (!on_grid) plan = decision.plan;
  info_.epoch = epoch;
  info_.agree_s = Since(t0);
  RTFT_LOG(kWarn, kLogRuntime) << "the job shrank from " << decision.old_size << " to " << world
                               << " ranks (this rank was " << held_rank_ << ", is now "
                               << rt_->current().rank << ")";
  RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  if (train_->world_size() != world)
    return Status::Aborted("the job moved on from epoch " + std::to_string(epoch));
  std::vector<int> new_of_old = decision.new_of_old;
  if (on_grid && decision.grid.ok) {
    if (decision.grid.tensor != o_.grid.tensor || decision.grid.pipeline != o_.grid.pipeline)
      return Status::Internal("the shrink was decided for another tensor x pipeline layout");
    const GridPlace me = grid_.of(train_->rank());
    plan = GroupShrinkPart(decision.grid, me.t, me.p, &new_of_old);
  } else if (on_grid) {
    plan.why = decision.grid.why;
  }
  RTFT_ASSIGN_OR_RETURN(ResizedState resized, Resize(NewPlace(world, train_->rank())));
  if (plan.ok) return ShrinkFromMemory(epoch, plan, new_of_old, std::move(resized), t0);
  RTFT_LOG(kError, kLogRuntime) << "shrink into epoch " << epoch << ": " << plan.why
                                << "; falling back to the newest L3 checkpoint";
  if (!l3_->enabled())
    return Status::DataLoss("the job shrank and " + plan.why +
                            "; there is no L3 checkpoint directory to fall back to");
  RTFT_RETURN_IF_ERROR(Relayout(std::move(resized)));
  return RestoreL3(epoch);
}

StatusOr<uint64_t> ProtectorImpl::ShrinkFromMemory(uint64_t epoch, const RecoveryPlan& plan,
                                                   const std::vector<int>& new_of_old,
                                                   ResizedState resized, Clock::time_point t0) {
  // The rows move straight into the new shards' memory, which must be the host's.
  for (const Entry& e : resized.layout.sharded)
    if (e.tensor.memory == MemoryKind::kDevice)
      return Status::Unimplemented("a shrink of shards in device memory ('" + e.tensor.name +
                                   "'): run with --on-spares-exhausted checkpoint-and-exit");
  // Replicated tensors and objects from this survivor's own snapshot, then the shards.
  RTFT_RETURN_IF_ERROR(l1_->RestoreShared(plan.step, resized.layout));
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(ShareOldTable(static_cast<int>(new_of_old.size())));
  RTFT_RETURN_IF_ERROR(CheckRowSplit());
  info_.rebuild_s = Since(t0);
  RTFT_RETURN_IF_ERROR(Redistribute(plan, new_of_old, resized.layout));
  info_.transfer_s = Since(t0);
  RTFT_RETURN_IF_ERROR(Relayout(std::move(resized)));
  RTFT_RETURN_IF_ERROR(state_->Restored().Annotate("after the shrink's restore"));
  // The restored step, captured again in the new layout: the first step's capture is skipped and
  // the snapshot replicated to the new ring neighbour.
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(layout_.objects));
  RTFT_RETURN_IF_ERROR(
      l1_->Capture(plan.step, epoch, train_->rank(), train_->world_size(), objects, o_.stream));
  info_.step = step_ = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  restored_step_ = plan.step;
  RTFT_LOG(kWarn, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " with " << train_->world_size() << " ranks: the shards "
                               << "redistributed over " << grid_.data() << " of "
                               << new_of_old.size() << " data-parallel ranks";
  return plan.step;
}

ShrinkPlace ProtectorImpl::NewPlace(int world, int rank) const {
  ShrinkPlace place;
  place.rank = rank;
  place.world_size = world;
  // Over the data-parallel group (the whole world when the layout is flat); grid_ is the new
  // epoch's.
  const GridPlace at = grid_.of(rank);
  for (const Entry& e : layout_.sharded)
    place.shards.push_back(
        EvenShard(e.tensor.name, e.tensor.dtype, e.tensor.shard.global_shape, at.data, at.d));
  return place;
}

// The application's state described again for `place`: the same tensors and objects, the shards
// where `place` puts them.
StatusOr<ProtectorImpl::ResizedState> ProtectorImpl::Resize(const ShrinkPlace& place) const {
  const std::string shrank = "the job shrank from " + std::to_string(held_world_) + " to " +
                             std::to_string(place.world_size) + " ranks";
  if (!resize_)
    return Status::FailedPrecondition(
        shrank + ", and the application gave Protector::Protect no ResizeState to lay its " +
        "state out again (or run with --on-spares-exhausted checkpoint-and-exit)");
  StatusOr<std::shared_ptr<StateProvider>> state = resize_(place);
  if (!state.ok()) return state.status().Annotate(shrank + ": ResizeState");
  if (!*state) return Status::InvalidArgument(shrank + ": ResizeState returned no state");
  StateDescription d;
  RTFT_RETURN_IF_ERROR((*state)->Describe(&d).Annotate(shrank));
  RTFT_ASSIGN_OR_RETURN(Layout l, Layout::Build(d, ObjectRoom()));
  bool same = l.replicated.size() == layout_.replicated.size() &&
              l.sharded.size() == place.shards.size() && l.objects.size() == layout_.objects.size();
  for (size_t i = 0; same && i < l.replicated.size(); ++i)
    same = SameTensor(l.replicated[i].tensor, layout_.replicated[i].tensor) &&
           l.replicated[i].tensor.shape == layout_.replicated[i].tensor.shape;
  for (size_t i = 0; same && i < l.sharded.size(); ++i) {
    const TensorDesc &t = l.sharded[i].tensor, &want = place.shards[i];
    same = SameTensor(t, want) && t.shape == want.shape && t.shard.offset == want.shard.offset &&
           t.shard.global_shape == want.shard.global_shape;
  }
  for (size_t i = 0; same && i < l.objects.size(); ++i)
    same = l.objects[i].name == layout_.objects[i].name;
  if (!same)
    return Status::InvalidArgument(shrank +
                                   ": ResizeState described other tensors or objects than "
                                   "before, or shards other than those of its ShrinkPlace");
  return ResizedState{std::move(l), std::move(*state)};
}

// The old shards must split each tensor's first dimension (whole in every other) for their rows to
// move to the new shards; the old world's table says where each was.
Status ProtectorImpl::CheckRowSplit() const {
  for (size_t i = 0; i < layout_.sharded.size(); ++i) {
    const std::vector<int64_t>& global = layout_.sharded[i].tensor.shard.global_shape;
    std::vector<std::pair<int64_t, int64_t>> rows;
    bool whole = true;
    for (int q = 0; q < table_.world(); ++q) {
      const Box& b = table_.at(q, i);
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
          "the shards of '" + layout_.sharded[i].tensor.name +
          "' do not split its first dimension between the ranks, so a shrink cannot lay them "
          "out again (run with --on-spares-exhausted checkpoint-and-exit)");
  }
  return Status::Ok();
}

Status ProtectorImpl::Relayout(ResizedState resized) {
  layout_ = std::move(resized.layout);
  stats_.state_bytes = layout_.objects_begin;
  state_ = std::move(resized.state);
  shards_ = Shards::kApplication;
  RTFT_RETURN_IF_ERROR(l1_->Relayout(dir_, layout_));
  l2_->Clear();
  RTFT_RETURN_IF_ERROR(PlaceShards());
  return OpenL3();
}

}  // namespace rtft::protect
