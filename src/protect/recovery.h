// Recovery and shrink (docs/protect.md, "Recovery" and "Shrink"), one object per attempt: it
// borrows the lasting parts (parts.h), owns the epoch it makes, the plan it follows and the
// transfer it runs, and returns what the facade installs (Recovered). recover.cc holds the
// agreement and the transfer, shrink.cc and redistribute.cc the shrink, l3.cc the fallback to L3.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "protect/parts.h"
#include "protect/plan.h"

namespace rtft::protect {

// What a recovery leaves for the facade to install.
struct Recovered {
  // The communicators as the attempt left them: the new epoch's, or (it failed before it made
  // them) the ones it was given.
  Epoch epoch;
  RecoveryInfo info;  // what it measured, added to what it was given
  StatusOr<uint64_t> step = Status::Internal("no recovery ran");
  bool in_memory = false;  // `step` restored from L1: its snapshot is the state itself
};

class Recovery {
 public:
  // `epoch`: the facade's communicators (dropped once this makes the new epoch's); `info`: what
  // the recovery measured so far; `ceiling`: after a replay found a device faulty, the newest
  // step the replays vouch for (docs/protect.md, "Replay"): no newer step is restored.
  Recovery(const Parts& parts, Epoch epoch, RecoveryInfo info,
           std::optional<uint64_t> ceiling = std::nullopt)
      : p_(parts), epoch_(std::move(epoch)), info_(std::move(info)), ceiling_(ceiling) {}

  // Into `epoch`: every rank sends what it holds to one gather, whose leader plans (restore from
  // memory, shrink, or fall back to L3) and sends the plan to all.
  Recovered Run(uint64_t epoch);

 private:
  StatusOr<uint64_t> Into(uint64_t epoch);
  StatusOr<AgreedPlan> Agree(uint64_t epoch, const RankState& mine, int world);
  // The needy ranks' state from their replica holders and sources (agreed_.plan).
  Status Transfer(uint64_t epoch);
  // The agreement's start_over: step 0 again, from the state each rank built or its L1 of it.
  StatusOr<uint64_t> StartOver(uint64_t epoch, const RankState& mine, Clock::time_point t0);

  const Parts p_;
  Epoch epoch_;
  RecoveryInfo info_;
  std::optional<uint64_t> ceiling_;
  AgreedPlan agreed_;
  bool in_memory_ = false;
};

class Shrink {
 public:
  Shrink(const Parts& parts, Epoch epoch, RecoveryInfo info)
      : p_(parts), epoch_(std::move(epoch)), info_(std::move(info)) {}

  // Into `epoch` of `world` ranks as the agreement's leader decided; `t0`: when the recovery began.
  // `l3_version`: where the decision has no plan, the L3 version to restore (the agreement's);
  // none: L3 holds no complete version.
  Recovered Run(uint64_t epoch, const ShrinkDecision& decision, int world, Clock::time_point t0,
                std::optional<uint64_t> l3_version);

 private:
  // The application's state described again for this rank's new place.
  struct Resized {
    Layout layout;
    std::shared_ptr<StateProvider> state;
  };

  StatusOr<uint64_t> Into(uint64_t epoch, const ShrinkDecision& decision, int world,
                          std::optional<uint64_t> l3_version);
  // Whether the job's new world can hold the grid: whole replicas of the default order.
  Status CanShrinkGrid(int world) const;
  StatusOr<uint64_t> FromMemory(uint64_t epoch, Resized resized);
  ShrinkPlace NewPlace(int world, int rank) const;
  StatusOr<Resized> Resize(const ShrinkPlace& place) const;
  Status CheckRowSplit() const;
  // redistribute.cc: every old shard's rows to the new shards that cover them.
  Status Redistribute(const Layout& resized);
  Status Relayout(Resized resized);

  const Parts p_;
  Epoch epoch_;
  RecoveryInfo info_;
  Clock::time_point t0_;
  RecoveryPlan plan_;            // this rank's data-parallel group's part, in its old positions
  std::vector<int> new_of_old_;  // per old position: its new one (-1: it left)
  bool in_memory_ = false;
};

// l3.cc. L3 version `version` restored in `epoch` (its communicators made in `e` when they are
// another epoch's): where memory holds no step every rank can resume from (the version the
// agreement's leader named, the same for every rank whatever a retired engine commits meanwhile),
// and where a job started again with its checkpoint directory begins (the one LATEST names).
// None: the leader found no complete version, a DATA_LOSS error.
StatusOr<uint64_t> RestoreL3(const Parts& parts, Epoch* e, uint64_t epoch, RecoveryInfo* info,
                             std::optional<uint64_t> version);
// The newest complete L3 version at or before `at_most`; none without L3 or such a version.
std::optional<uint64_t> NewestL3Version(const Parts& parts, uint64_t at_most);
// A job started again (rank 0, before the first epoch's communicators, so before any rank
// writes): the versions an earlier run left after the one LATEST names (not committed, or
// committed without LATEST moving) are removed, as this run writes them again. Logged; an error
// to remove one is logged too and changes nothing else. Nothing without LATEST.
void WithdrawVersionsAfterLatest(const Parts& parts);
// A job started again under RTFT_PROTECT_RESUME_FROM agreed or replayed (docs/protect.md, "A job
// started again"): the newest complete version, no newer than LATEST, with that mark. None when
// there is no L3 or nothing complete (the job starts at step 0, as with LATEST); an error naming
// the newest version's marks when versions exist but none has the mark. Every rank asks it of
// the same directory and gets the same answer while rank 0 withdraws the versions after it.
StatusOr<std::optional<uint64_t>> ResumeVersion(const Parts& parts, Settings::ResumeFrom want);
// Checkpoint-and-exit (docs/protect.md, "Spares exhausted"), once the survivors' replication
// stopped: they agree on a step and write one L3 version of it, lost ranks' files included.
Status WriteFinalCheckpoint(const Parts& parts, const Epoch& e, const FailureEvent& event);

}  // namespace rtft::protect
