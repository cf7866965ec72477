// Recovery (docs/protect.md, "Recovery"): every rank of the new epoch publishes what it holds
// (complete L1 steps, replicas), all compute the same plan from what all published (the newest
// step every rank can restore, and who feeds the ranks that hold nothing), build the epoch's
// communicators, move the missing state, and restore that step.
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "runtime/protect/protector_impl.h"

namespace rtft::protect {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWorld = int64_t{1} << 24;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Key(uint64_t epoch, int rank) {
  return "protect/e" + std::to_string(epoch) + "/rank/" + std::to_string(rank);
}

}  // namespace

std::string EncodeRankState(const RankState& s) {
  json l2 = json::array();
  for (const auto& [owner, step] : s.l2) l2.push_back({owner, step});
  return json{{"v", 1},
              {"rank", s.rank},
              {"was", s.was},
              {"was_world", s.was_world},
              {"hash", s.layout_hash},
              {"l1", s.l1},
              {"l2", l2}}
      .dump();
}

RankState DecodeRankState(const std::string& text, int rank) {
  RankState s;
  s.rank = rank;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("hash") || !j["hash"].is_number_unsigned() ||
      !j.contains("l1") || !j["l1"].is_array() || !j.contains("l2") || !j["l2"].is_array())
    return s;
  s.layout_hash = j["hash"].get<uint64_t>();
  // The world it held state for; anything out of range holds none.
  if (j.contains("was") && j["was"].is_number_integer() && j.contains("was_world") &&
      j["was_world"].is_number_integer()) {
    const int64_t was = j["was"].get<int64_t>(), world = j["was_world"].get<int64_t>();
    if (world > 0 && world <= kMaxWorld && was >= 0 && was < world) {
      s.was = static_cast<int>(was);
      s.was_world = static_cast<int>(world);
    }
  }
  for (const auto& v : j["l1"])
    if (v.is_number_unsigned()) s.l1.push_back(v.get<uint64_t>());
  for (const auto& v : j["l2"])
    if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_unsigned())
      s.l2.emplace_back(v[0].get<int>(), v[1].get<uint64_t>());
  return s;
}

namespace {

bool Has(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks, uint64_t layout_hash) {
  RecoveryPlan plan;
  const int n = static_cast<int>(ranks.size());
  // Candidate steps: those some rank's L1 holds, newest first.
  std::vector<uint64_t> candidates;
  for (const RankState& r : ranks)
    if (r.layout_hash == layout_hash)
      for (uint64_t s : r.l1) candidates.push_back(s);
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (uint64_t step : candidates) {
    RecoveryPlan p;
    p.step = step;
    bool possible = true;
    for (int r = 0; r < n && possible; ++r) {
      const RankState& s = ranks[r];
      if (s.layout_hash == layout_hash && Has(s.l1, step)) {
        if (p.replicated_source < 0) p.replicated_source = r;
        continue;
      }
      // Rank r holds nothing of `step`: its replica is on its right neighbour.
      const int h = (r + 1) % n;
      const RankState& holder = ranks[h];
      const bool held =
          holder.layout_hash == layout_hash &&
          std::find(holder.l2.begin(), holder.l2.end(), std::make_pair(r, step)) != holder.l2.end();
      if (!held || h == r) {
        possible = false;
        p.why = "rank " + std::to_string(r) + "'s state of step " + std::to_string(step) +
                " is neither in its own snapshot nor replicated on rank " + std::to_string(h);
        break;
      }
      p.needy.push_back(r);
      p.holder.push_back(h);
    }
    if (possible && p.replicated_source >= 0) {
      p.ok = true;
      return p;
    }
    if (plan.why.empty())
      plan.why = p.replicated_source < 0 ? "no rank holds step " + std::to_string(step) : p.why;
  }
  if (plan.why.empty()) plan.why = "no rank holds a complete snapshot";
  return plan;
}

RecoveryPlan PlanShrink(std::vector<RankState> old, const std::vector<bool>& survived,
                        uint64_t layout_hash) {
  const int n = static_cast<int>(old.size());
  if (static_cast<int>(survived.size()) != n) {
    RecoveryPlan p;
    p.why = "the survivors do not match the old world";
    return p;
  }
  for (int r = 0; r < n; ++r) {
    if (!survived[r]) {
      old[r] = RankState();  // a lost rank holds nothing
      old[r].rank = r;
    }
  }
  // A survivor restores its own snapshot, never a replica: only lost ranks' replicas count.
  for (RankState& s : old)
    s.l2.erase(std::remove_if(s.l2.begin(), s.l2.end(),
                              [&](const std::pair<int, uint64_t>& h) {
                                return h.first < 0 || h.first >= n || survived[h.first];
                              }),
               s.l2.end());
  RecoveryPlan plan = PlanRecovery(old, layout_hash);
  for (size_t i = 0; plan.ok && i < plan.needy.size(); ++i) {
    if (survived[plan.needy[i]] || !survived[plan.holder[i]]) {
      plan.ok = false;
      plan.why = "rank " + std::to_string(plan.needy[i]) + "'s state is not on a survivor";
    }
  }
  return plan;
}

StatusOr<uint64_t> ProtectorImpl::Recover() {
  if (!started_) return Status::FailedPrecondition("Protector::Start() first");
  if (shutdown_) return ShutDown();
  if (!o_.enabled)
    return Status::FailedPrecondition(
        "protection is off (ProtectOptions::enabled): nothing to "
        "recover from");
  (void)JoinCapture();
  in_step_ = false;
  StopReplication();
  const uint64_t from = train_ ? train_->epoch() : 0;
  const auto t0 = Clock::now();
  const auto deadline = t0 + recovery_timeout_;
  // The failure event names the epoch to recover into.
  while (EventEpoch() <= from && !shutdown_ && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(1));
  if (shutdown_) return ShutDown();
  if (EventEpoch() <= from)
    return Status::DeadlineExceeded("no failure event came within " +
                                    std::to_string(recovery_timeout_.count()) +
                                    " ms of a failed call (is dp-launch running this job?)");
  info_ = RecoveryInfo();
  info_.wait_event_s = Since(t0);
  return RecoverFrom(EventEpoch(), deadline);
}

// The job is ending: under checkpoint-and-exit, the checkpoint first.
Status ProtectorImpl::ShutDown() {
  bool checkpoint = false;
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    checkpoint = shutdown_event_ && shutdown_event_->checkpoint_first;
  }
  if (checkpoint) RTFT_RETURN_IF_ERROR(FinalCheckpoint());
  return Status::Aborted(checkpoint ? "the job is shutting down (its checkpoint is written)"
                                    : "the job is shutting down");
}

// A failure during recovery moves the job to another epoch: start over there.
StatusOr<uint64_t> ProtectorImpl::RecoverFrom(uint64_t epoch, Clock::time_point deadline) {
  while (true) {
    auto step = RecoverInto(epoch);
    if (step.ok() || step.status().code() != StatusCode::kAborted || shutdown_) return step;
    RTFT_LOG(kWarn, kLogRuntime) << "recovery into epoch " << epoch << " failed: " << step.status()
                                 << "; waiting for the next epoch";
    while (EventEpoch() <= epoch && !shutdown_ && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
    if (EventEpoch() <= epoch || shutdown_) return step;
    epoch = EventEpoch();
  }
}

void ProtectorImpl::StopReplication() {
  replicator_.reset();  // aborts its communicator; its thread ends
  RetireL3();           // a commit may wait for a rank that is gone
}

StatusOr<std::vector<RankState>> ProtectorImpl::Gather(uint64_t epoch, const RankState& mine) {
  RTFT_RETURN_IF_ERROR(rt_->KvPut(Key(epoch, mine.rank), EncodeRankState(mine)));
  const int n = rt_->current().world_size;
  std::vector<RankState> all(n);
  const auto deadline = Clock::now() + recovery_timeout_;
  for (int r = 0; r < n; ++r) {
    while (true) {
      if (EventEpoch() > epoch) return Status::Aborted("epoch " + std::to_string(epoch) + " ended");
      auto v = rt_->KvGet(Key(epoch, r), milliseconds(50));
      if (v.ok()) {
        all[r] = DecodeRankState(*v, r);
        break;
      }
      if (v.status().code() != StatusCode::kDeadlineExceeded) return v.status();
      if (Clock::now() >= deadline)
        return Status::DeadlineExceeded("rank " + std::to_string(r) +
                                        " did not join the recovery of epoch " +
                                        std::to_string(epoch));
    }
  }
  return all;
}

StatusOr<uint64_t> ProtectorImpl::RecoverInto(uint64_t epoch) {
  const auto t0 = Clock::now();
  const RuntimeInfo now = rt_->current();
  if (now.epoch != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(now.epoch));
  FaultPoint("protect.recover");
  RankState mine;
  mine.rank = now.rank;
  mine.was = held_rank_;
  mine.was_world = held_world_;
  mine.layout_hash = layout_.replicated_hash;
  mine.l1 = l1_->CompleteSteps();
  for (const auto& h : l2_->Complete()) mine.l2.emplace_back(h.owner, h.step);
  RTFT_ASSIGN_OR_RETURN(std::vector<RankState> all, Gather(epoch, mine));
  info_.world_size = now.world_size;
  // Every rank takes the same path, decided from what all published.
  for (const RankState& r : all)
    if (r.was_world > 0 && r.was_world != now.world_size) return Shrink(epoch, all, t0);
  if (shards_stale_)
    return Status::Internal("this rank's snapshot is laid out for another world than the job's");
  const RecoveryPlan plan = PlanRecovery(all, layout_.replicated_hash);
  info_.epoch = epoch;
  info_.agree_s = Since(t0);
  if (!plan.ok) {
    RTFT_LOG(kError, kLogRuntime) << "recovery of epoch " << epoch << ": " << plan.why
                                  << "; falling back to the newest L3 checkpoint";
    return RestoreL3(epoch);
  }
  RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  RTFT_RETURN_IF_ERROR(PlaceShards());
  RTFT_RETURN_IF_ERROR(OpenL3());
  info_.rebuild_s = Since(t0);
  FaultPoint("protect.transfer");
  RTFT_RETURN_IF_ERROR(Transfer(plan, epoch));
  info_.transfer_s = Since(t0);
  RTFT_RETURN_IF_ERROR(l1_->Restore(plan.step));
  info_.step = plan.step;
  restored_step_ = plan.step;
  info_.source = "l1";
  info_.ranks_fed = static_cast<int>(plan.needy.size());
  step_ = plan.step;
  RTFT_LOG(kInfo, kLogRuntime) << "recovered into epoch " << epoch << " at step " << plan.step
                               << " (" << plan.needy.size() << " rank(s) fed by peers)";
  return plan.step;
}

// For each rank that holds nothing, in rank order: its replica holder sends the replica (sharded
// tensors and objects), then the replicated tensors' source sends those. Every rank runs its
// part in that one order, so no two ranks wait on each other.
Status ProtectorImpl::Transfer(const RecoveryPlan& plan, uint64_t epoch) {
  if (plan.needy.empty()) return Status::Ok();
  if (!replicator_)
    return Status::Internal("a recovery transfer without a replication communicator");
  Communicator* c = replicator_->comm();
  const int me = c->rank();
  const uint64_t step = plan.step;
  const size_t replica_max = layout_.objects_begin + layout_.object_capacity - layout_.shard_begin;
  char* area = l1_->payload(step);
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    const int n = plan.needy[i], h = plan.holder[i], src = plan.replicated_source;
    uint64_t size = 0;
    if (me == h) {
      std::vector<ReplicaStore::Held> held = l2_->Complete();
      for (const auto& x : held)
        if (x.owner == n && x.step == step) size = x.bytes;
      RTFT_RETURN_IF_ERROR(c->Send(&size, 1, DType::kInt64, n));
      RTFT_RETURN_IF_ERROR(c->Send(l2_->Data(step), size, DType::kUInt8, n));
      info_.bytes_moved += size;
    }
    if (me == n) {
      RTFT_RETURN_IF_ERROR(c->Recv(&size, 1, DType::kInt64, h));
      if (size > replica_max || size < layout_.objects_begin - layout_.shard_begin)
        return Status::DataLoss("rank " + std::to_string(h) + " holds a replica of " +
                                std::to_string(size) + " bytes, which this state cannot hold");
      l1_->Invalidate(step);
      RTFT_RETURN_IF_ERROR(c->Recv(area + layout_.shard_begin, size, DType::kUInt8, h));
    }
    if (me == src && layout_.shard_begin > 0) {
      RTFT_RETURN_IF_ERROR(c->Send(area, layout_.shard_begin, DType::kUInt8, n));
      info_.bytes_moved += layout_.shard_begin;
    }
    if (me == n) {
      if (layout_.shard_begin > 0)
        RTFT_RETURN_IF_ERROR(c->Recv(area, layout_.shard_begin, DType::kUInt8, src));
      const uint64_t object_bytes = size - (layout_.objects_begin - layout_.shard_begin);
      l1_->Seal(step, epoch, me, c->world_size(), object_bytes);
    }
  }
  return Status::Ok();
}

}  // namespace rtft::protect
