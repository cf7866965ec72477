// Recovery (docs/protect.md, "Recovery"): every rank of the new epoch sends what it holds
// (complete L1 steps, replicas) to one gather, whose leader plans from what all sent (the newest
// step every rank can restore, and who feeds the ranks that hold nothing) and sends the plan to
// all; they build the epoch's communicators, move the missing state, and restore that step.
#include <algorithm>
#include <limits>

#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/recovery.h"
#include "runtime/gather.h"

namespace rtft::protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The lowest ceiling the ranks sent: after a replay found a device faulty, the newest step the
// replays vouch for (the survivors saw the same verdict; a spare sends none).
std::optional<uint64_t> Ceiling(const std::vector<RankState>& all) {
  std::optional<uint64_t> c;
  for (const RankState& r : all)
    if (r.ceiling) c = std::min(c.value_or(*r.ceiling), *r.ceiling);
  return c;
}

// What every rank holds of the steps up to `ceiling`.
std::vector<RankState> Within(std::vector<RankState> all, uint64_t ceiling) {
  for (RankState& r : all) {
    r.l1.erase(std::remove_if(r.l1.begin(), r.l1.end(), [&](uint64_t s) { return s > ceiling; }),
               r.l1.end());
    r.l2.erase(
        std::remove_if(r.l2.begin(), r.l2.end(),
                       [&](const std::pair<int, uint64_t>& h) { return h.second > ceiling; }),
        r.l2.end());
  }
  return all;
}

// Where a rollback under `ceiling` goes (docs/protect.md, "Replay"), for the recovery and the
// shrink alike: `newest` and `within` are the steps memory can restore without the ceiling and
// within it (none: it cannot). kWithin: the step within it; kL3: memory holds none that old, the
// newest complete L3 version at or before it (`l3_version`); kNewest: neither, so the job goes on
// from state the faulty device may have touched. The choice is logged.
struct Bounded {
  enum Take { kWithin, kL3, kNewest } take = kNewest;
  std::optional<uint64_t> l3_version;
  std::string why;  // with kL3
};
Bounded ChooseWithin(const Parts& p, const char* what, uint64_t ceiling,
                     std::optional<uint64_t> newest, std::optional<uint64_t> within) {
  const std::string why = "a replay found a device faulty and the steps after step " +
                          std::to_string(ceiling) + " were not replayed: ";
  if (within) {
    if (newest != within)
      RTFT_LOG(kError, kLogRuntime) << why << "the " << what << " goes back to step " << *within
                                    << " in memory, the newest the replays vouch for";
    return {Bounded::kWithin, std::nullopt, ""};
  }
  if (const auto version = NewestL3Version(p, ceiling)) {
    RTFT_LOG(kError, kLogRuntime) << why << "memory holds no step that old; the " << what
                                  << " goes back to L3 version " << *version;
    return {Bounded::kL3, version, why + "memory holds no step that old"};
  }
  RTFT_LOG(kError, kLogRuntime)
      << why << "neither memory nor L3 holds a step that old, so the " << what
      << " goes on from the newest state, which the faulty device's gradients may have changed "
         "(set the L3 interval to a multiple of RTFT_PROTECT_REPLAY_EVERY to keep one)";
  return {};
}

// Where the L3 fallback has nothing to restore: no checkpoint directory, or none complete in it
// (LATEST names only a complete version).
bool NoL3Version(const Parts& p) {
  return !NewestL3Version(p, std::numeric_limits<uint64_t>::max()).has_value();
}

std::optional<uint64_t> StepOf(const RecoveryPlan& plan) {
  return plan.ok ? std::optional<uint64_t>(plan.step) : std::nullopt;
}

// The recovery's plan under a ceiling (ChooseWithin).
void PlanWithin(const Parts& p, const std::vector<RankState>& all,
                const std::vector<std::vector<int>>& groups, uint64_t ceiling, AgreedPlan* agreed) {
  RecoveryPlan within = PlanRecovery(Within(all, ceiling), groups);
  Bounded b = ChooseWithin(p, "recovery", ceiling, StepOf(agreed->plan), StepOf(within));
  if (b.take == Bounded::kNewest) return;
  if (b.take == Bounded::kL3) within.why = std::move(b.why);
  agreed->plan = std::move(within);
  agreed->l3_version = b.l3_version;
}

// The step a shrink's decision resumes from memory; none: it has no plan.
std::optional<uint64_t> StepOf(const ShrinkDecision& d, const Grid& wanted) {
  const bool on_grid = wanted.tensor > 1 || wanted.pipeline > 1;
  if (on_grid ? !d.grid.ok : !d.plan.ok) return std::nullopt;
  return on_grid ? d.grid.step : d.plan.step;
}

// The shrink's decision, under a ceiling as the recovery's plan (ChooseWithin); with kL3 the
// decision has no plan, and Shrink restores the agreement's L3 version.
void ShrinkWithin(const Parts& p, const std::vector<RankState>& all, const Grid& wanted,
                  std::optional<uint64_t> ceiling, AgreedPlan* agreed) {
  const auto decide = [&](const std::vector<RankState>& states) {
    return DecideShrink(states, wanted.tensor, wanted.pipeline, p.held->layout.shared_hash);
  };
  const auto step = [&](const ShrinkDecision& d) { return StepOf(d, wanted); };
  ShrinkDecision newest = decide(all);
  if (!ceiling) {
    agreed->shrink_decision = std::move(newest);
    return;
  }
  ShrinkDecision within = decide(Within(all, *ceiling));
  const Bounded b = ChooseWithin(p, "shrink", *ceiling, step(newest), step(within));
  agreed->shrink_decision = std::move(b.take == Bounded::kNewest ? newest : within);
  agreed->l3_version = b.l3_version;
}

// The leader's last word on L3 (docs/protect.md, "Recovery"). Where the decision restores from L3
// and no ceiling named the version, it names the newest complete one, so that every rank restores
// that very version whatever a retired engine commits meanwhile (none: every rank fails alike).
// Then the complete versions after the step the job goes back to are withdrawn (after the ceiling
// where that is lower): the job runs those steps again and writes them again.
void SettleL3(const Parts& p, const std::vector<RankState>& all, uint64_t epoch,
              AgreedPlan* agreed) {
  if (!p.l3->enabled()) return;
  const Grid& wanted = p.settings->options.grid;
  std::optional<uint64_t> back_to =
      agreed->shrink ? StepOf(agreed->shrink_decision, wanted) : StepOf(agreed->plan);
  if (!back_to && !agreed->start_over) {
    if (!agreed->l3_version)
      agreed->l3_version = NewestL3Version(p, std::numeric_limits<uint64_t>::max());
    back_to = agreed->l3_version;
  }
  const std::optional<uint64_t> ceiling = Ceiling(all);
  const std::string faulty = ceiling
                                 ? "a replay found a device faulty and vouches for no step after " +
                                       std::to_string(*ceiling)
                                 : std::string();
  if (ceiling && (!back_to || *ceiling < *back_to)) {
    p.l3->Withdraw(*ceiling, epoch,
                   "written from state the replays do not vouch for (" + faulty + ")");
  } else if (back_to) {
    p.l3->Withdraw(*back_to, epoch,
                   "the recovery into epoch " + std::to_string(epoch) + " went back to step " +
                       std::to_string(*back_to) +
                       (ceiling ? " (" + faulty + ")" : ", which the job runs on from again"));
  }
}

}  // namespace

// The rollback agreement as one gather (docs/protect.md, "Recovery"): every rank sends its
// state once; rank 0 receives them all, decides with the planner, and sends the decision back
// through the gather, so each rank sends one message and receives one. kAborted once the job
// moves past `epoch`, as the coordinator ends the gathers of an epoch that ended.
StatusOr<AgreedPlan> Recovery::Agree(uint64_t epoch, const RankState& mine, int world) {
  const std::string key = "protect/e" + std::to_string(epoch) + "/agree";
  const Grid& wanted = p_.settings->options.grid;
  RTFT_ASSIGN_OR_RETURN(KvGatherReply reply,
                        KvGather(p_.rt, key, epoch, world, mine.rank, EncodeRankState(mine),
                                 /*all=*/false, p_.settings->recovery_timeout));
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
    ShrinkWithin(p_, all, wanted, Ceiling(all), &agreed);
  } else {
    auto grid = GridMap::Make(wanted, world);
    if (grid.ok()) {
      agreed.plan = PlanRecovery(all, grid->DataGroups());
      if (const auto ceiling = Ceiling(all))
        PlanWithin(p_, all, grid->DataGroups(), *ceiling, &agreed);
      agreed.start_over = !agreed.plan.ok && !agreed.l3_version &&
                          CanStartOver(all, p_.held->layout.shared_hash) && NoL3Version(p_);
    } else {
      grid_error = grid.status();
      agreed.plan.why = grid_error.message();
    }
  }
  // Before any rank of the new epoch writes a version.
  if (grid_error.ok()) SettleL3(p_, all, epoch, &agreed);
  // The others wait for this even when it failed here: they then fail the same way.
  RTFT_RETURN_IF_ERROR(KvGatherResult(p_.rt, key, epoch, EncodeAgreedPlan(agreed)));
  RTFT_RETURN_IF_ERROR(grid_error);
  return agreed;
}

Recovered Recovery::Run(uint64_t epoch) {
  StatusOr<uint64_t> step = Into(epoch);
  return Recovered{std::move(epoch_), std::move(info_), std::move(step), in_memory_};
}

StatusOr<uint64_t> Recovery::Into(uint64_t epoch) {
  const auto t0 = Clock::now();
  const RuntimeInfo now = p_.rt->current();
  if (now.epoch != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(now.epoch));
  FaultPoint("protect.recover");
  RankState mine = p_.held->Mine(now.rank);
  mine.ceiling = ceiling_;
  RTFT_ASSIGN_OR_RETURN(agreed_, Agree(epoch, mine, now.world_size));
  info_.world_size = now.world_size;
  // Every rank takes the same path, decided by the leader from what all published.
  if (agreed_.shrink) {
    // The leader decided the shrink from every rank's state; it came with the agreement.
    Recovered shrunk =
        Shrink(p_, std::move(epoch_), std::move(info_))
            .Run(epoch, agreed_.shrink_decision, now.world_size, t0, agreed_.l3_version);
    epoch_ = std::move(shrunk.epoch);
    info_ = std::move(shrunk.info);
    in_memory_ = shrunk.in_memory;
    return shrunk.step;
  }
  if (p_.held->shards != Held::Shards::kApplication)
    return Status::Internal("this rank's snapshot is laid out for another world than the job's");
  // The layout's error, on every rank alike (the leader planned with it).
  RTFT_RETURN_IF_ERROR(GridMap::Make(p_.settings->options.grid, now.world_size).status());
  const RecoveryPlan& plan = agreed_.plan;
  info_.epoch = epoch;
  info_.agree_s = Since(t0);
  if (agreed_.start_over) return StartOver(epoch, mine, t0);
  if (!plan.ok) {
    RTFT_LOG(kError, kLogRuntime) << "recovery of epoch " << epoch << ": " << plan.why
                                  << "; falling back to "
                                  << (agreed_.l3_version
                                          ? "L3 version " + std::to_string(*agreed_.l3_version)
                                          : std::string("L3, which holds no complete version"));
    return RestoreL3(p_, &epoch_, epoch, &info_, agreed_.l3_version);
  }
  RTFT_RETURN_IF_ERROR(epoch_.Build(p_, epoch));
  RTFT_RETURN_IF_ERROR(p_.held->PlaceShards(epoch_));
  // Not needed before the next L3 step: training goes on while it is made.
  RTFT_RETURN_IF_ERROR(epoch_.OpenL3(p_, L3Writer::When::kInBackground));
  info_.rebuild_s = Since(t0);
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(Transfer(epoch));
  info_.transfer_s = Since(t0);
  RTFT_RETURN_IF_ERROR(p_.held->Restored(plan.step, /*sharded=*/true));
  info_.step = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  in_memory_ = true;
  RTFT_LOG(kInfo, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " (" << plan.needy.size() << " rank(s) fed by peers)";
  return plan.step;
}

// A rank lost before the job's first snapshot was complete (docs/protect.md, "Lost before the
// first snapshot"): no step can be restored from memory and there is no L3 version, but every
// rank's state is as its application built it, or its L1 holds step 0. The job starts again at
// step 0: a rank whose state is untouched keeps it (a spare built it as the rank it replaces
// did), one that began step 0 restores its snapshot of it.
StatusOr<uint64_t> Recovery::StartOver(uint64_t epoch, const RankState& mine,
                                       Clock::time_point t0) {
  RTFT_LOG(kWarn, kLogRuntime) << "recovery of epoch " << epoch << ": " << agreed_.plan.why
                               << "; no step was protected yet and no L3 version exists: the job "
                                  "starts again at step 0 from the state each rank built";
  RTFT_RETURN_IF_ERROR(epoch_.Build(p_, epoch));
  RTFT_RETURN_IF_ERROR(p_.held->PlaceShards(epoch_));
  RTFT_RETURN_IF_ERROR(epoch_.OpenL3(p_, L3Writer::When::kInBackground));
  info_.rebuild_s = Since(t0);
  if (mine.untouched_world == 0 || !mine.l1.empty()) {
    RTFT_RETURN_IF_ERROR(p_.held->Restored(0, /*sharded=*/true));
    in_memory_ = true;
  }
  info_.transfer_s = Since(t0);
  info_.step = 0;
  info_.source = "start";
  return uint64_t{0};
}

// For each rank that holds nothing, in rank order: its replica holder sends the replica (sharded
// tensors and objects), then a source of its data-parallel group sends the replicated tensors.
// Every rank of a group runs its part in that one order, on the group's replication
// communicator (positions in the ring), so no two ranks wait on each other.
Status Recovery::Transfer(uint64_t epoch) {
  const RecoveryPlan& plan = agreed_.plan;
  const GridMap& grid = epoch_.grid;
  const Layout& layout = p_.held->layout;
  Snapshot* l1 = p_.held->l1.get();
  ReplicaStore* l2 = p_.held->l2.get();
  const GridPlace me_at = grid.of(epoch_.train->rank());
  std::vector<size_t> mine;  // the needy ranks of this rank's group
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    const GridPlace& at = grid.of(plan.needy[i]);
    if (at.t == me_at.t && at.p == me_at.p) mine.push_back(i);
  }
  if (mine.empty()) return Status::Ok();
  if (!epoch_.replicator) return Status::Internal("a recovery transfer without a replication comm");
  const uint64_t step = plan.step;
  const size_t head = layout.replica_begin();  // fed from a peer; the rest from the replica
  const size_t replica_max = layout.replica_bytes(layout.object_capacity);
  const size_t replica_min = layout.replica_bytes(0);
  char* area = l1->payload(step);
  return epoch_.replicator->Call([&](Communicator* c) -> Status {
    const int me = c->rank();
    for (size_t i : mine) {
      // Positions in the data-parallel ring, which the replicas' owners are too.
      const int n = grid.of(plan.needy[i]).d, h = grid.of(plan.holder[i]).d;
      const int src = grid.of(plan.source[i]).d;
      uint64_t size = 0;
      if (me == h) {
        if (auto held = l2->Find(n, step)) size = held->bytes;
        RTFT_RETURN_IF_ERROR(c->Send(&size, 1, DType::kInt64, n));
        RTFT_RETURN_IF_ERROR(c->Send(l2->Data(step), size, DType::kUInt8, n));
        info_.bytes_moved += size;
      }
      if (me == n) {
        RTFT_RETURN_IF_ERROR(c->Recv(&size, 1, DType::kInt64, h));
        if (size > replica_max || size < replica_min)
          return Status::DataLoss("rank " + std::to_string(h) + " holds a replica of " +
                                  std::to_string(size) + " bytes, which this state cannot hold");
        l1->Invalidate(step);
        RTFT_RETURN_IF_ERROR(c->Recv(area + head, size, DType::kUInt8, h));
      }
      if (me == src && head > 0) {
        RTFT_RETURN_IF_ERROR(c->Send(area, head, DType::kUInt8, n));
        info_.bytes_moved += head;
      }
      if (me == n) {
        if (head > 0) RTFT_RETURN_IF_ERROR(c->Recv(area, head, DType::kUInt8, src));
        l1->Seal(step, epoch, epoch_.train->rank(), epoch_.train->world_size(), size - replica_min);
      }
    }
    return Status::Ok();
  });
}

}  // namespace rtft::protect
