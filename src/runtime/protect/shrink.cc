// Shrink (docs/protect.md, "Shrink"): no spare was left, the job goes on with fewer ranks,
// renumbered densely in their old order. Each sharded tensor is the concatenation of every rank's
// shard in rank order, in the old world as in the new one: the survivors agree on a step whose
// state is complete (their own L1, and each lost rank's L2 replica on a survivor), the
// application resizes its shards for its new rank, and every byte of the old concatenation moves
// from where it is (a survivor's L1, a holder's replica) to the new rank whose shard covers it.
// Replicated tensors and objects come back from each survivor's own L1.
#include <algorithm>
#include <cstring>

#include "core/fault_point.h"
#include "core/logging.h"
#include "runtime/protect/protector_impl.h"

namespace rtft::protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

StatusOr<std::vector<TensorDesc>> ProtectorImpl::NewShards(int world, int rank) const {
  const std::string shrank = "the job shrank from " + std::to_string(held_world_) + " to " +
                             std::to_string(world) + " ranks";
  if (!reshard_)
    return Status::FailedPrecondition(
        shrank + ", and the application gave no Protector::OnShrink to resize its sharded " +
        "tensors (or run with --on-spares-exhausted checkpoint-and-exit)");
  StatusOr<std::vector<TensorDesc>> resized = reshard_(world, rank);
  if (!resized.ok()) return resized.status().Annotate(shrank + ": OnShrink");
  std::vector<TensorDesc> shards = std::move(*resized);
  if (shards.size() != layout_.sharded.size())
    return Status::InvalidArgument(shrank + ": OnShrink returned " + std::to_string(shards.size()) +
                                   " sharded tensors, not " +
                                   std::to_string(layout_.sharded.size()));
  for (size_t i = 0; i < shards.size(); ++i) {
    const TensorDesc& was = layout_.sharded[i].tensor;
    const TensorDesc& t = shards[i];
    if (t.name != was.name || t.dtype != was.dtype)
      return Status::InvalidArgument(shrank + ": OnShrink returned '" + t.name +
                                     "' where sharded tensor '" + was.name + "' (same type) was " +
                                     "expected");
    if (t.memory != MemoryKind::kHost || (t.elements() > 0 && t.data == nullptr))
      return Status::InvalidArgument(shrank + ": OnShrink returned '" + t.name +
                                     "' without host memory");
  }
  return shards;
}

StatusOr<uint64_t> ProtectorImpl::Shrink(uint64_t epoch, const std::vector<RankState>& all,
                                         Clock::time_point t0) {
  const RuntimeInfo now = rt_->current();
  const int world = static_cast<int>(all.size());
  // The old world, as every survivor knew it.
  int old_world = 0;
  for (const RankState& r : all) old_world = std::max(old_world, r.was_world);
  std::vector<RankState> old(old_world);
  std::vector<int> new_of_old(old_world, -1);
  std::string fresh;  // a rank that holds no state of the old world
  for (const RankState& r : all) {
    if (r.was_world != old_world || r.was < 0 || new_of_old[r.was] >= 0) {
      fresh = "rank " + std::to_string(r.rank) + " of the shrunk job holds no state of the old one";
      continue;
    }
    new_of_old[r.was] = r.rank;
    old[r.was] = r;
    old[r.was].rank = r.was;
  }
  std::vector<bool> survived(old_world);
  for (int q = 0; q < old_world; ++q) survived[q] = new_of_old[q] >= 0;
  RecoveryPlan plan;
  if (fresh.empty()) {
    plan = PlanShrink(old, survived, layout_.replicated_hash);
  } else {
    plan.why = fresh;
  }
  info_.epoch = epoch;
  info_.agree_s = Since(t0);
  RTFT_LOG(kWarn, kLogRuntime) << "the job shrank from " << old_world << " to " << world
                               << " ranks (this rank was " << held_rank_ << ", is now " << now.rank
                               << ")";
  RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  if (train_->world_size() != world)
    return Status::Aborted("the job moved on from epoch " + std::to_string(epoch));
  RTFT_ASSIGN_OR_RETURN(std::vector<TensorDesc> shards, NewShards(world, train_->rank()));
  if (!plan.ok) {
    RTFT_LOG(kError, kLogRuntime) << "shrink into epoch " << epoch << ": " << plan.why
                                  << "; falling back to the newest L3 checkpoint";
    if (ckpt_dir_.empty())
      return Status::DataLoss("the job shrank and " + plan.why +
                              "; there is no L3 checkpoint directory to fall back to");
    RTFT_RETURN_IF_ERROR(Relayout(shards));
    return RestoreL3(epoch);
  }
  info_.rebuild_s = Since(t0);
  // Replicated tensors and objects from this survivor's own snapshot, then the shards.
  RTFT_RETURN_IF_ERROR(l1_->Restore(plan.step, /*sharded=*/false));
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(ShareOldCounts(old_world));
  RTFT_RETURN_IF_ERROR(Redistribute(plan, new_of_old, shards));
  info_.transfer_s = Since(t0);
  RTFT_RETURN_IF_ERROR(Relayout(shards));
  // The restored step, captured again in the new layout: the first step's capture is skipped and
  // the snapshot replicated to the new ring neighbour.
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(layout_.objects));
  RTFT_RETURN_IF_ERROR(l1_->Capture(plan.step, epoch, train_->rank(), world, objects));
  info_.step = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  restored_step_ = plan.step;
  step_ = plan.step;
  RTFT_LOG(kWarn, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " with " << world << " of " << old_world
                               << " ranks: the shards redistributed";
  return plan.step;
}

// For each sharded tensor, each new rank d and each old rank q (every rank in that one order,
// so no two wait on each other): the part of q's old shard that d's new shard covers goes from
// q's bytes (q's own L1 when q survived, its replica on its old right neighbour when not) to d.
Status ProtectorImpl::Redistribute(const RecoveryPlan& plan, const std::vector<int>& new_of_old,
                                   std::vector<TensorDesc>& shards) {
  Communicator* c = replicator_ ? replicator_->comm() : nullptr;
  const int me = train_->rank(), world = train_->world_size();
  const int old_world = static_cast<int>(new_of_old.size());
  const size_t n = shards.size();
  if (static_cast<int>(counts_.size()) != old_world)
    return Status::Internal("shard sizes of " + std::to_string(counts_.size()) +
                            " ranks for an old world of " + std::to_string(old_world));
  if (world > 1 && c == nullptr)
    return Status::Internal("a shrink without a replication communicator");
  // Every new rank's shard sizes.
  std::vector<int64_t> mine(n), all(n * world);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int64_t>(shards[i].elements());
  if (world > 1 && n > 0) {
    RTFT_RETURN_IF_ERROR(c->AllGather(mine.data(), all.data(), n, DType::kInt64));
  } else {
    all = mine;
  }
  // Where each old rank's bytes are: the new rank that holds them, and (on that rank) where.
  std::vector<int> source(old_world, -1);
  std::vector<int> holder_of(old_world, -1);
  for (size_t k = 0; k < plan.needy.size(); ++k) holder_of[plan.needy[k]] = plan.holder[k];
  for (int q = 0; q < old_world; ++q) {
    const int h = new_of_old[q] >= 0 ? q : holder_of[q];
    if (h < 0 || new_of_old[h] < 0)
      return Status::Internal("the shrink plan places rank " + std::to_string(q) +
                              "'s state nowhere");
    source[q] = new_of_old[h];
  }
  const uint64_t step = plan.step;
  // On a holder: each lost rank's replica, its shards 4 KiB aligned in declaration order.
  std::vector<std::vector<const char*>> at(old_world, std::vector<const char*>(n, nullptr));
  for (int q = 0; q < old_world; ++q) {
    if (source[q] != me) continue;
    if (new_of_old[q] == me) {
      for (size_t i = 0; i < n; ++i) at[q][i] = l1_->payload(step) + layout_.sharded[i].offset;
      continue;
    }
    uint64_t bytes = 0;
    for (const auto& h : l2_->Complete())
      if (h.owner == q && h.step == step) bytes = h.bytes;
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
      at[q][i] = l2_->Data(step) + off;
      off = AlignUp(off + counts_[q][i] * DTypeSize(shards[i].dtype));
    }
    if (bytes == 0 || off > bytes)
      return Status::DataLoss("this rank's replica of rank " + std::to_string(q) + "'s step " +
                              std::to_string(step) + " is missing or short");
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t es = DTypeSize(shards[i].dtype);
    int64_t old_total = 0, new_total = 0;
    for (int q = 0; q < old_world; ++q) old_total += counts_[q][i];
    for (int d = 0; d < world; ++d) new_total += all[d * n + i];
    if (old_total != new_total)
      return Status::InvalidArgument("after the shrink the shards of '" + shards[i].name +
                                     "' add up to " + std::to_string(new_total) +
                                     " elements, not " + std::to_string(old_total));
    int64_t new_begin = 0;
    for (int d = 0; d < world; ++d) {
      const int64_t new_end = new_begin + all[d * n + i];
      int64_t old_begin = 0;
      for (int q = 0; q < old_world; ++q) {
        const int64_t old_end = old_begin + counts_[q][i];
        const int64_t lo = std::max(old_begin, new_begin), hi = std::min(old_end, new_end);
        if (lo < hi) {
          const size_t bytes = static_cast<size_t>(hi - lo) * es;
          const int src = source[q];
          if (src == me && d == me) {
            std::memcpy(static_cast<char*>(shards[i].data) + (lo - new_begin) * es,
                        at[q][i] + (lo - old_begin) * es, bytes);
          } else if (src == me) {
            RTFT_RETURN_IF_ERROR(
                c->Send(at[q][i] + (lo - old_begin) * es, bytes, DType::kUInt8, d));
            info_.bytes_moved += bytes;
          } else if (d == me) {
            RTFT_RETURN_IF_ERROR(c->Recv(static_cast<char*>(shards[i].data) + (lo - new_begin) * es,
                                         bytes, DType::kUInt8, src));
          }
        }
        old_begin = old_end;
      }
      new_begin = new_end;
    }
  }
  return Status::Ok();
}

Status ProtectorImpl::ShareOldCounts(int old_world) {
  const size_t n = layout_.sharded.size();
  int32_t have = static_cast<int32_t>(counts_.size()) == old_world ? 1 : 0;
  for (const auto& row : counts_) have = have && row.size() == n;
  Communicator* c = replicator_ ? replicator_->comm() : nullptr;
  if (c == nullptr || c->world_size() == 1 || n == 0) {
    if (have) return Status::Ok();
    return Status::Internal("no shard sizes of the old world of " + std::to_string(old_world) +
                            " ranks");
  }
  std::vector<int32_t> all(c->world_size());
  RTFT_RETURN_IF_ERROR(c->AllGather(&have, all.data(), 1, DType::kInt32));
  const auto src = std::find(all.begin(), all.end(), 1);
  if (src == all.end()) return Status::DataLoss("no rank knows the old world's shard sizes");
  if (std::find(all.begin(), all.end(), 0) == all.end()) return Status::Ok();  // all have them
  std::vector<int64_t> flat(static_cast<size_t>(old_world) * n);
  if (have)
    for (int q = 0; q < old_world; ++q)
      std::copy(counts_[q].begin(), counts_[q].end(), flat.begin() + q * n);
  RTFT_RETURN_IF_ERROR(
      c->Broadcast(flat.data(), flat.size(), DType::kInt64, static_cast<int>(src - all.begin())));
  if (!have) {
    counts_.assign(old_world, std::vector<int64_t>(n));
    for (int q = 0; q < old_world; ++q)
      std::copy(flat.begin() + q * n, flat.begin() + (q + 1) * n, counts_[q].begin());
  }
  return Status::Ok();
}

Status ProtectorImpl::Relayout(const std::vector<TensorDesc>& shards) {
  for (size_t i = 0; i < shards.size(); ++i) layout_.sharded[i].tensor = shards[i];
  shards_stale_ = false;
  RTFT_RETURN_IF_ERROR(layout_.Finish(ObjectRoom()));
  RTFT_RETURN_IF_ERROR(l1_->Relayout(dir_, layout_));
  l2_->Clear();
  RTFT_RETURN_IF_ERROR(PlaceShards());
  return OpenL3();
}

}  // namespace rtft::protect
