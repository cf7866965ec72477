#include "control/coordinator/membership_table.h"

#include <algorithm>

#include "core/check.h"

namespace rtft::control {

MembershipTable::MembershipTable(const TableOptions& options) : options_(options) {
  RTFT_CHECK(options.slots >= 1 && options.slots <= kMaxSlots);
  RTFT_CHECK(options.coordinator_slots >= 0 && options.coordinator_slots <= 1);
  RTFT_CHECK(options.spares >= 0 && options.spares < options.slots - options.coordinator_slots);
  RTFT_CHECK(options.grid_tensor >= 1 && options.grid_pipeline >= 1);
  const int32_t actives = options.slots - options.spares;
  members_.resize(options.slots);
  exit_codes_.resize(options.slots);
  for (SlotId s = 0; s < options.slots; ++s) {
    members_[s].slot = s;
    if (s < options.coordinator_slots) {
      members_[s].role = Role::kCoordinator;
    } else if (s < actives) {
      members_[s].rank = static_cast<LogicalRank>(m_.rank_to_slot.size());
      members_[s].role = Role::kActive;
      m_.rank_to_slot.push_back(s);
    } else {
      members_[s].role = Role::kSpare;
      m_.spares.push_back(s);
    }
  }
  m_.epoch = 1;
  SyncRoles();
}

void MembershipTable::SyncRoles() {
  m_.world_size = static_cast<int32_t>(m_.rank_to_slot.size());
  m_.slot_roles.resize(members_.size());
  for (size_t s = 0; s < members_.size(); ++s) m_.slot_roles[s] = members_[s].role;
  // The device travels with the rank: listed only when some slot has one.
  m_.devices.clear();
  const bool any = std::any_of(members_.begin(), members_.end(),
                               [](const Member& mb) { return mb.device >= 0; });
  if (!any) return;
  for (SlotId s : m_.rank_to_slot) m_.devices.push_back(s >= 0 ? members_[s].device : -1);
}

void MembershipTable::Join(SlotId slot, const std::string& host, int32_t device, int32_t gpus) {
  if (slot < 0 || slot >= slots()) return;
  Member& mb = members_[slot];
  mb.host = host;
  const bool valid = gpus > 0 && gpus <= kMaxGpusPerNode && device >= 0 && device < gpus;
  mb.gpus = valid ? gpus : 0;
  mb.device = valid ? device : -1;
  SyncRoles();
}

// The lost slot's GPU when it was on the spare's node (it is free now); otherwise a GPU of the
// spare's node that no rank holds, else the spare's own (its local index's).
int32_t MembershipTable::DeviceFor(SlotId spare, SlotId lost) const {
  const Member& sp = members_[spare];
  const Member& was = members_[lost];
  if (sp.gpus <= 0) return -1;
  if (!sp.host.empty() && was.host == sp.host && was.device >= 0 && was.device < sp.gpus)
    return was.device;
  std::vector<bool> held(static_cast<size_t>(sp.gpus), false);
  for (SlotId s : m_.rank_to_slot) {
    if (s < 0 || s == lost || members_[s].host != sp.host) continue;
    const int32_t d = members_[s].device;
    if (d >= 0 && d < sp.gpus) held[static_cast<size_t>(d)] = true;
  }
  for (int32_t d = 0; d < sp.gpus; ++d)
    if (!held[static_cast<size_t>(d)]) return d;
  return sp.device;
}

ControlEvent MembershipTable::NewEvent(ControlEvent::Type type, std::vector<LogicalRank> failed,
                                       std::string reason) {
  SyncRoles();
  ControlEvent e;
  e.type = type;
  e.membership = m_;
  std::sort(failed.begin(), failed.end());
  e.failed_ranks = std::move(failed);
  e.reason = std::move(reason);
  return e;
}

std::optional<int32_t> MembershipTable::AllExited() {
  for (SlotId s : m_.rank_to_slot) {
    if (s >= 0 && !exit_codes_[s]) return std::nullopt;
  }
  return first_bad_exit_.value_or(0);
}

Decision MembershipTable::Fail(const std::vector<SlotFailure>& input) {
  Decision d;
  if (state_ == State::kOver) return d;
  std::vector<SlotFailure> failures;
  for (const auto& f : input) {
    const bool seen = std::any_of(failures.begin(), failures.end(),
                                  [&](const SlotFailure& g) { return g.slot == f.slot; });
    // A slot whose application already finished has nothing left to lose.
    if (f.slot < 0 || f.slot >= slots() || seen || retired(f.slot) || exit_codes_[f.slot] ||
        !has_agent(f.slot))
      continue;
    // A corrupt copy is repaired only while the job runs, and only a rank holds one.
    if (f.kind == FailureKind::kCorrupt &&
        (state_ != State::kRunning || members_[f.slot].rank == kNoRank))
      continue;
    failures.push_back(f);
  }
  if (failures.empty()) return d;
  std::sort(failures.begin(), failures.end(),
            [](const SlotFailure& a, const SlotFailure& b) { return a.slot < b.slot; });

  std::vector<LogicalRank> failed, vacated;
  std::vector<SlotId> held_by(m_.rank_to_slot.size(), -1);  // a vacated rank's last slot
  std::string reason;
  for (const auto& f : failures) {
    Member& mb = members_[f.slot];
    // A corrupt copy (docs/protect.md, "Silent data corruption"): the rank stays where it is and
    // every rank recovers in place into the new epoch (back to the last step whose copies
    // agreed); it counts as a restart. A
    // slot whose copy is found corrupt a second time (a faulty device) is retired and a spare
    // takes its rank, as is one past the restart limit.
    const bool corrupt = f.kind == FailureKind::kCorrupt;
    if (corrupt) ++mb.corruptions;
    if (corrupt && mb.corruptions < 2 && mb.restarts < options_.max_restarts_per_slot) {
      ++mb.restarts;
      if (!reason.empty()) reason += "; ";
      reason += "slot " + std::to_string(f.slot) + " (rank " + std::to_string(mb.rank) +
                "): " + FailureKindName(f.kind) + ", recovered in place (restart " +
                std::to_string(mb.restarts) + "/" + std::to_string(options_.max_restarts_per_slot) +
                ")";
      continue;
    }
    const bool restartable = f.kind == FailureKind::kProcessCrash || f.kind == FailureKind::kHang;
    // While draining (checkpoint-and-exit) nothing is restarted: a lost rank just fails.
    const bool transient =
        state_ == State::kRunning && restartable && mb.restarts < options_.max_restarts_per_slot;
    const FailureKind kind =
        restartable && !transient && state_ == State::kRunning ? FailureKind::kRepeated : f.kind;
    if (!reason.empty()) reason += "; ";
    reason += "slot " + std::to_string(f.slot) +
              (mb.rank != kNoRank ? " (rank " + std::to_string(mb.rank) + ")" : " (spare)") + ": " +
              FailureKindName(kind);
    if (corrupt)
      reason += mb.corruptions > 1 ? " again (" + std::to_string(mb.corruptions) + " times)"
                                   : " past the restart limit";
    if (mb.rank != kNoRank) failed.push_back(mb.rank);
    if (transient) {
      ++mb.restarts;
      if (mb.rank != kNoRank) mb.role = Role::kRestarted;
      reason += ", restart " + std::to_string(mb.restarts) + "/" +
                std::to_string(options_.max_restarts_per_slot);
      continue;
    }
    reason += ", slot retired";
    if (mb.rank != kNoRank) {
      vacated.push_back(mb.rank);
      held_by[mb.rank] = f.slot;
      m_.rank_to_slot[mb.rank] = -1;
      if (state_ == State::kDraining) {
        exit_codes_[f.slot] = 1;
        if (!first_bad_exit_) first_bad_exit_ = 1;
      }
    } else {
      m_.spares.erase(std::remove(m_.spares.begin(), m_.spares.end(), f.slot), m_.spares.end());
    }
    mb.role = Role::kRetired;
    mb.rank = kNoRank;
    m_.retired.push_back(f.slot);
  }

  if (state_ == State::kDraining) {
    // The shutdown was already announced; only the end of the job can follow.
    SyncRoles();
    if (auto code = AllExited()) {
      state_ = State::kOver;
      d.job_exit_code = code;
    }
    return d;
  }

  std::sort(vacated.begin(), vacated.end());
  std::vector<LogicalRank> unfilled;
  for (LogicalRank r : vacated) {
    if (m_.spares.empty()) {
      unfilled.push_back(r);
      continue;
    }
    const SlotId s = m_.spares.front();
    m_.spares.erase(m_.spares.begin());
    members_[s].role = Role::kActivated;
    members_[s].rank = r;
    if (held_by[r] >= 0) members_[s].device = DeviceFor(s, held_by[r]);
    m_.rank_to_slot[r] = s;
    reason += "; rank " + std::to_string(r) + " -> spare slot " + std::to_string(s);
  }
  ++m_.epoch;
  if (!unfilled.empty()) return Exhausted(unfilled, std::move(failed), std::move(reason));
  d.event = NewEvent(ControlEvent::Type::kEpochChange, std::move(failed), std::move(reason));
  return d;
}

Decision MembershipTable::Exhausted(const std::vector<LogicalRank>& unfilled,
                                    std::vector<LogicalRank> failed, std::string reason) {
  Decision d;
  reason += "; no spare left for " + std::to_string(unfilled.size()) +
            " rank(s): " + PolicyName(options_.on_spares_exhausted);
  switch (options_.on_spares_exhausted) {
    case SparesExhaustedPolicy::kShrink: {
      if (!ShrinkRanks(unfilled, &reason)) {
        state_ = State::kOver;
        d.job_exit_code = 1;
        d.event =
            NewEvent(ControlEvent::Type::kShutdown, std::move(failed), reason + "; no rank left");
        d.event->exit_code = 1;
        return d;
      }
      if (auto code = AllExited()) {
        // Every surviving rank had already finished: the job is complete.
        state_ = State::kOver;
        d.job_exit_code = code;
        d.event = NewEvent(ControlEvent::Type::kShutdown, std::move(failed), std::move(reason));
        d.event->exit_code = *code;
        return d;
      }
      d.event = NewEvent(ControlEvent::Type::kEpochChange, std::move(failed), std::move(reason));
      return d;
    }
    case SparesExhaustedPolicy::kCheckpointAndExit:
      state_ = State::kDraining;
      d.event = NewEvent(ControlEvent::Type::kShutdown, std::move(failed), std::move(reason));
      d.event->checkpoint_first = true;
      if (auto code = AllExited()) {
        state_ = State::kOver;
        d.job_exit_code = code;
      }
      return d;
    case SparesExhaustedPolicy::kFail:
      state_ = State::kOver;
      d.job_exit_code = 1;
      d.event = NewEvent(ControlEvent::Type::kShutdown, std::move(failed), std::move(reason));
      d.event->exit_code = 1;
      return d;
  }
  return d;
}

std::optional<ReplicaDrop> DropReplicas(int32_t tensor, int32_t pipeline, int32_t world,
                                        const std::vector<LogicalRank>& unfilled) {
  const int64_t unit = static_cast<int64_t>(tensor) * pipeline;
  if (tensor < 1 || pipeline < 1 || world < 1 || world % unit != 0) return std::nullopt;
  const int32_t d_count = static_cast<int32_t>(world / unit);
  std::vector<bool> leaves(d_count, false);
  for (LogicalRank r : unfilled) {
    if (r < 0 || r >= world) return std::nullopt;
    leaves[(r / tensor) % d_count] = true;
  }
  ReplicaDrop drop;
  std::vector<int32_t> new_d(d_count, -1);
  for (int32_t d = 0; d < d_count; ++d) {
    if (leaves[d])
      drop.left.push_back(d);
    else
      new_d[d] = drop.data++;
  }
  drop.new_of_old.assign(world, -1);
  for (int32_t r = 0; r < world; ++r) {
    const int32_t t = r % tensor, d = (r / tensor) % d_count, p = r / (tensor * d_count);
    if (new_d[d] >= 0) drop.new_of_old[r] = t + tensor * (new_d[d] + drop.data * p);
  }
  return drop;
}

bool MembershipTable::ShrinkRanks(const std::vector<LogicalRank>& unfilled, std::string* reason) {
  const int32_t world = static_cast<int32_t>(m_.rank_to_slot.size());
  std::optional<ReplicaDrop> drop;
  if (options_.grid_tensor * options_.grid_pipeline > 1)
    drop = DropReplicas(options_.grid_tensor, options_.grid_pipeline, world, unfilled);
  std::vector<SlotId> next;
  if (!drop) {
    for (SlotId s : m_.rank_to_slot) {
      if (s < 0) continue;
      members_[s].rank = static_cast<LogicalRank>(next.size());
      next.push_back(s);
    }
    m_.rank_to_slot = std::move(next);
    return !m_.rank_to_slot.empty();
  }
  next.assign(static_cast<size_t>(drop->data) * options_.grid_tensor * options_.grid_pipeline, -1);
  std::string joined;
  for (LogicalRank r = 0; r < world; ++r) {
    const SlotId s = m_.rank_to_slot[r];
    if (s < 0) continue;
    if (drop->new_of_old[r] >= 0) {
      members_[s].rank = drop->new_of_old[r];
      next[drop->new_of_old[r]] = s;
      continue;
    }
    // A rank of a replica that left: its slot becomes a spare (its agent starts the application
    // again in standby), unless its application already ended.
    members_[s].rank = kNoRank;
    if (exit_codes_[s]) {
      members_[s].role = Role::kRetired;
      m_.retired.push_back(s);
      continue;
    }
    members_[s].role = Role::kSpare;
    m_.spares.push_back(s);
    joined += (joined.empty() ? "" : ",") + std::to_string(s);
  }
  m_.rank_to_slot = std::move(next);
  std::string replicas;
  for (int32_t d : drop->left) replicas += (replicas.empty() ? "" : ",") + std::to_string(d);
  *reason += "; data-parallel replica(s) " + replicas + " of " +
             std::to_string(options_.grid_tensor) + " x " + std::to_string(options_.grid_pipeline) +
             " x " + std::to_string(drop->data + static_cast<int32_t>(drop->left.size())) +
             " left" + (joined.empty() ? "" : ", slot(s) " + joined + " join the spare pool");
  return !m_.rank_to_slot.empty();
}

Decision MembershipTable::Exit(SlotId slot, int32_t code) {
  Decision d;
  if (state_ == State::kOver || slot < 0 || slot >= slots() || retired(slot) || exit_codes_[slot] ||
      !has_agent(slot)) {
    return d;
  }
  const LogicalRank rank = members_[slot].rank;
  if (rank == kNoRank) {
    // A spare whose application ended for good can no longer take a rank: it leaves the pool.
    if (state_ != State::kRunning) return d;
    Member& mb = members_[slot];
    mb.role = Role::kRetired;
    m_.spares.erase(std::remove(m_.spares.begin(), m_.spares.end(), slot), m_.spares.end());
    m_.retired.push_back(slot);
    ++m_.epoch;
    d.event = NewEvent(ControlEvent::Type::kEpochChange, {},
                       "slot " + std::to_string(slot) + " (spare): application exited with code " +
                           std::to_string(code) + ", slot retired");
    return d;
  }
  exit_codes_[slot] = code;
  if (code != 0 && !first_bad_exit_) first_bad_exit_ = code;
  const bool running = state_ == State::kRunning;
  if (running && code != 0) {
    state_ = State::kOver;
    d.job_exit_code = code;
    d.event = NewEvent(ControlEvent::Type::kShutdown, {rank},
                       "rank " + std::to_string(rank) + " (slot " + std::to_string(slot) +
                           ") exited with code " + std::to_string(code));
    d.event->exit_code = code;
    return d;
  }
  if (auto all = AllExited()) {
    state_ = State::kOver;
    d.job_exit_code = all;
    if (running) {
      d.event = NewEvent(ControlEvent::Type::kShutdown, {}, "every rank finished");
      d.event->exit_code = *all;
    }
  }
  return d;
}

}  // namespace rtft::control
