// Recovery (docs/protect.md, "Recovery"): every rank of the new epoch sends what it holds
// (complete L1 steps, replicas) to one gather, whose leader plans from what all sent (the newest
// step every rank can restore, and who feeds the ranks that hold nothing) and sends the plan to
// all; they build the epoch's communicators, move the missing state, and restore that step.
#include <algorithm>

#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/protector.h"
#include "runtime/gather.h"

namespace rtft::protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

StatusOr<uint64_t> ProtectorImpl::Recover() {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (shutdown_) return ShutDown();
  if (!o_.enabled)
    return Status::FailedPrecondition(
        "protection is off (ProtectOptions::enabled): nothing to recover from");
  (void)capture_->Wait();
  phase_ = Phase::kReady;
  StopReplication();
  const uint64_t from = train_ ? train_->epoch() : 0;
  const auto t0 = Clock::now();
  const auto deadline = t0 + recovery_timeout_;
  // The failure event names the epoch to recover into.
  const bool moved = WaitForEpochAfter(from, deadline);
  if (shutdown_) return ShutDown();
  if (!moved)
    return Status::DeadlineExceeded("no failure event came within " +
                                    std::to_string(recovery_timeout_.count()) +
                                    " ms of a failed call (is dp-launch running this job?)");
  info_ = RecoveryInfo();
  info_.wait_event_s = Since(t0);
  auto step = RecoverFrom(EventEpoch(), deadline);
  info_.total_s = Since(t0);
  if (step.ok()) next_step_ = *step;
  return step;
}

bool ProtectorImpl::WaitForEpochAfter(uint64_t epoch, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(event_mu_);
  // The runtime's current epoch may move ahead of our listener (Start() of a spare): recheck it
  // every few milliseconds as well.
  while (EventEpoch() <= epoch && !shutdown_ && Clock::now() < deadline)
    event_cv_.wait_for(lock, milliseconds(5));
  return EventEpoch() > epoch;
}

// The job is ending: under checkpoint-and-exit, the checkpoint first.
Status ProtectorImpl::ShutDown() {
  bool checkpoint = false;
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    checkpoint = shutdown_event_ && shutdown_event_->checkpoint_first;
  }
  if (checkpoint) {
    RTFT_RETURN_IF_ERROR(FinalCheckpoint());
    info_.final_checkpoint = true;
  }
  return Status::Shutdown(checkpoint ? "the job is shutting down (its checkpoint is written)"
                                     : "the job is shutting down");
}

// A failure during recovery moves the job to another epoch: start over there.
StatusOr<uint64_t> ProtectorImpl::RecoverFrom(uint64_t epoch, Clock::time_point deadline) {
  while (true) {
    auto step = RecoverInto(epoch);
    if (step.ok() || step.status().code() != StatusCode::kAborted) return step;
    if (shutdown_) return ShutDown();
    RTFT_LOG(kWarn, kLogRuntime) << "recovery into epoch " << epoch << " failed: " << step.status()
                                 << "; waiting for the next epoch";
    StopReplication();
    if (!WaitForEpochAfter(epoch, deadline)) return shutdown_ ? ShutDown() : step;
    epoch = EventEpoch();
  }
}

void ProtectorImpl::StopReplication() {
  replicator_.reset();  // aborts its communicator; its thread ends
  l3_->Retire();        // a commit may wait for a rank that is gone
}

RankState ProtectorImpl::Mine(int rank) const {
  RankState mine;
  mine.rank = rank;
  mine.was = held_rank_;
  mine.was_world = held_world_;
  mine.layout_hash = layout_.shared_hash;
  mine.l1 = l1_->CompleteSteps();
  for (const auto& h : l2_->Complete()) mine.l2.emplace_back(h.owner, h.step);
  return mine;
}

// The survivors' agreement at checkpoint-and-exit (docs/protect.md, "Spares exhausted"): the
// rollback agreement's gather among the survivors alone, over the job's store (the coordinator's
// gather counts every rank of the epoch, and the lost ones send nothing). The lowest survivor
// leads: it reads every survivor's state, plans, and sends the plan; 3N operations on the store,
// each wait a request it holds for a second.
StatusOr<RecoveryPlan> ProtectorImpl::AgreeFinal(uint64_t epoch, int me,
                                                 const std::vector<bool>& lost) {
  const int n = static_cast<int>(lost.size());
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (!lost[r]) survivors.push_back(r);
  const auto at = std::find(survivors.begin(), survivors.end(), me);
  if (at == survivors.end())
    return Status::Internal("checkpoint-and-exit: this rank is not among the survivors");
  const int index = static_cast<int>(at - survivors.begin());
  const std::string key = "protect/final";
  RTFT_ASSIGN_OR_RETURN(KvGatherReply reply,
                        KvStoreGather(rt_, key, epoch, static_cast<int>(survivors.size()), index,
                                      EncodeRankState(Mine(me)), /*all=*/false, recovery_timeout_,
                                      milliseconds(1000)));
  if (index != 0) {
    if (!reply.result) return Status::Internal("checkpoint-and-exit: no plan came");
    RTFT_ASSIGN_OR_RETURN(AgreedPlan agreed, DecodeAgreedPlan(*reply.result, n));
    if (agreed.shrink) return Status::Internal("checkpoint-and-exit: the leader sent a shrink");
    return agreed.plan;
  }
  if (reply.values.size() != survivors.size())
    return Status::Internal("checkpoint-and-exit: the gather lost a survivor's state");
  std::vector<RankState> all(n);
  for (int r = 0; r < n; ++r) all[r].rank = r;  // the lost ranks hold nothing
  for (size_t i = 0; i < survivors.size(); ++i)
    all[survivors[i]] = DecodeRankState(reply.values[i], survivors[i]);
  AgreedPlan agreed;
  agreed.plan = PlanRecovery(all, grid_.DataGroups());
  // The others wait for this even when it failed: they then fail the same way.
  RTFT_RETURN_IF_ERROR(KvStoreGatherResult(rt_, key, epoch, EncodeAgreedPlan(agreed)));
  return agreed.plan;
}

// The rollback agreement as one gather (docs/protect.md, "Recovery"): every rank sends its
// state once; rank 0 receives them all, decides with the planner, and sends the decision back
// through the gather, so each rank sends one message and receives one. kAborted once the job
// moves past `epoch`, as the coordinator ends the gathers of an epoch that ended.
StatusOr<AgreedPlan> ProtectorImpl::Agree(uint64_t epoch, const RankState& mine, int world) {
  const std::string key = "protect/e" + std::to_string(epoch) + "/agree";
  RTFT_ASSIGN_OR_RETURN(KvGatherReply reply,
                        KvGather(rt_, key, epoch, world, mine.rank, EncodeRankState(mine),
                                 /*all=*/false, recovery_timeout_));
  if (mine.rank != 0) {
    if (!reply.result) return Status::Internal("the agreement's answer carries no plan");
    return DecodeAgreedPlan(*reply.result, world);
  }
  if (static_cast<int>(reply.values.size()) != world)
    return Status::Internal("the agreement gathered " + std::to_string(reply.values.size()) +
                            " states of " + std::to_string(world) + " ranks");
  std::vector<RankState> all;
  all.reserve(reply.values.size());
  for (int r = 0; r < world; ++r) all.push_back(DecodeRankState(reply.values[r], r));
  AgreedPlan agreed;
  for (const RankState& r : all)
    agreed.shrink = agreed.shrink || (r.was_world > 0 && r.was_world != world);
  Status grid_error;
  if (agreed.shrink) {
    agreed.shrink_decision =
        DecideShrink(all, o_.grid.tensor, o_.grid.pipeline, layout_.shared_hash);
  } else {
    auto grid = GridMap::Make(o_.grid, world);
    if (grid.ok()) {
      agreed.plan = PlanRecovery(all, grid->DataGroups());
    } else {
      grid_error = grid.status();
      agreed.plan.why = grid_error.message();
    }
  }
  // The others wait for this even when it failed here: they then fail the same way.
  RTFT_RETURN_IF_ERROR(KvGatherResult(rt_, key, epoch, EncodeAgreedPlan(agreed)));
  RTFT_RETURN_IF_ERROR(grid_error);
  return agreed;
}

StatusOr<uint64_t> ProtectorImpl::RecoverInto(uint64_t epoch) {
  const auto t0 = Clock::now();
  const RuntimeInfo now = rt_->current();
  if (now.epoch != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(now.epoch));
  FaultPoint("protect.recover");
  RTFT_ASSIGN_OR_RETURN(const AgreedPlan agreed, Agree(epoch, Mine(now.rank), now.world_size));
  info_.world_size = now.world_size;
  // Every rank takes the same path, decided by the leader from what all published.
  if (agreed.shrink) {
    if (o_.grid.tensor > 1 || o_.grid.pipeline > 1) RTFT_RETURN_IF_ERROR(CanShrinkGrid(now));
    // The leader decided the shrink from every rank's state; it came with the agreement.
    return Shrink(epoch, agreed.shrink_decision, now.world_size, t0);
  }
  if (shards_ != Shards::kApplication)
    return Status::Internal("this rank's snapshot is laid out for another world than the job's");
  // The layout's error, on every rank alike (the leader planned with it).
  RTFT_RETURN_IF_ERROR(GridMap::Make(o_.grid, now.world_size).status());
  const RecoveryPlan& plan = agreed.plan;
  info_.epoch = epoch;
  info_.agree_s = Since(t0);
  if (!plan.ok) {
    RTFT_LOG(kError, kLogRuntime) << "recovery of epoch " << epoch << ": " << plan.why
                                  << "; falling back to the newest L3 checkpoint";
    return RestoreL3(epoch);
  }
  RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  RTFT_RETURN_IF_ERROR(PlaceShards());
  // Not needed before the next L3 step: training goes on while it is made.
  RTFT_RETURN_IF_ERROR(OpenL3(L3Writer::When::kInBackground));
  info_.rebuild_s = Since(t0);
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(Transfer(plan, epoch));
  info_.transfer_s = Since(t0);
  RTFT_RETURN_IF_ERROR(Restored(plan.step, /*sharded=*/true));
  info_.step = step_ = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  restored_step_ = plan.step;
  RTFT_LOG(kInfo, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " (" << plan.needy.size() << " rank(s) fed by peers)";
  return plan.step;
}

Status ProtectorImpl::Restored(uint64_t step, bool sharded) {
  RTFT_RETURN_IF_ERROR(l1_->Restore(step, sharded));
  return state_->Restored().Annotate("after restoring step " + std::to_string(step));
}

// For each rank that holds nothing, in rank order: its replica holder sends the replica (sharded
// tensors and objects), then a source of its data-parallel group sends the replicated tensors.
// Every rank of a group runs its part in that one order, on the group's replication
// communicator (positions in the ring), so no two ranks wait on each other.
Status ProtectorImpl::Transfer(const RecoveryPlan& plan, uint64_t epoch) {
  const GridPlace me_at = grid_.of(train_->rank());
  std::vector<size_t> mine;  // the needy ranks of this rank's group
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    const GridPlace& at = grid_.of(plan.needy[i]);
    if (at.t == me_at.t && at.p == me_at.p) mine.push_back(i);
  }
  if (mine.empty()) return Status::Ok();
  if (!replicator_) return Status::Internal("a recovery transfer without a replication comm");
  const uint64_t step = plan.step;
  const size_t head = layout_.shard_begin;
  const size_t replica_max = layout_.replica_bytes(layout_.object_capacity);
  const size_t replica_min = layout_.replica_bytes(0);
  char* area = l1_->payload(step);
  return replicator_->Call([&](Communicator* c) -> Status {
    const int me = c->rank();
    for (size_t i : mine) {
      // Positions in the data-parallel ring, which the replicas' owners are too.
      const int n = grid_.of(plan.needy[i]).d, h = grid_.of(plan.holder[i]).d;
      const int src = grid_.of(plan.source[i]).d;
      uint64_t size = 0;
      if (me == h) {
        if (auto held = l2_->Find(n, step)) size = held->bytes;
        RTFT_RETURN_IF_ERROR(c->Send(&size, 1, DType::kInt64, n));
        RTFT_RETURN_IF_ERROR(c->Send(l2_->Data(step), size, DType::kUInt8, n));
        info_.bytes_moved += size;
      }
      if (me == n) {
        RTFT_RETURN_IF_ERROR(c->Recv(&size, 1, DType::kInt64, h));
        if (size > replica_max || size < replica_min)
          return Status::DataLoss("rank " + std::to_string(h) + " holds a replica of " +
                                  std::to_string(size) + " bytes, which this state cannot hold");
        l1_->Invalidate(step);
        RTFT_RETURN_IF_ERROR(c->Recv(area + head, size, DType::kUInt8, h));
      }
      if (me == src && head > 0) {
        RTFT_RETURN_IF_ERROR(c->Send(area, head, DType::kUInt8, n));
        info_.bytes_moved += head;
      }
      if (me == n) {
        if (head > 0) RTFT_RETURN_IF_ERROR(c->Recv(area, head, DType::kUInt8, src));
        l1_->Seal(step, epoch, train_->rank(), train_->world_size(), size - replica_min);
      }
    }
    return Status::Ok();
  });
}

}  // namespace rtft::protect
