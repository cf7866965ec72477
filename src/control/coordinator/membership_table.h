// The coordinator's decisions, without any I/O: the membership table, epochs, the spare pool,
// failure classification (docs/architecture.md, "Failure handling") and the job's end. The
// coordinator feeds it failures and exits and broadcasts what it returns; tests drive it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control/wire/types.h"

namespace rtft::control {

struct TableOptions {
  int32_t slots = 1;
  int32_t spares = 0;
  int32_t max_restarts_per_slot = 3;
  SparesExhaustedPolicy on_spares_exhausted = SparesExhaustedPolicy::kCheckpointAndExit;
  // The first `coordinator_slots` slots (0 or 1) run only the coordinator: no agent, no rank, no
  // failure (--coordinator-slot dedicated).
  int32_t coordinator_slots = 0;
  // The job's tensor x pipeline degrees (dp-launch --grid TxP), ranks laid out as
  // t + T * (d + D * p): a shrink drops the whole data-parallel replica d of a rank it cannot
  // fill, and that replica's other ranks join the spare pool (docs/protect.md, "3D layouts").
  int32_t grid_tensor = 1;
  int32_t grid_pipeline = 1;
};

// A shrink of a T x P x D layout that loses the ranks `unfilled` (of `world` = T * P * D): the
// replicas d that hold one of them leave, every other rank keeps (t, p) and gets d' (its d less
// the replicas below it that left). new_of_old[r]: the new rank of old rank r, -1 for a rank of a
// replica that left; `left`: those replicas, ascending. Empty when T * P does not divide `world`
// or an unfilled rank is outside it.
struct ReplicaDrop {
  std::vector<int32_t> new_of_old;
  std::vector<int32_t> left;
  int32_t data = 0;  // D' = D - left.size()
};
std::optional<ReplicaDrop> DropReplicas(int32_t tensor, int32_t pipeline, int32_t world,
                                        const std::vector<LogicalRank>& unfilled);

struct SlotFailure {
  SlotId slot = -1;
  FailureKind kind = FailureKind::kProcessCrash;
  int32_t detail = 0;
};

// What the coordinator must do after a call: broadcast `event` (when set) to every live agent,
// and end the job with `job_exit_code` (when set).
struct Decision {
  std::optional<ControlEvent> event;
  std::optional<int32_t> job_exit_code;
};

class MembershipTable {
 public:
  explicit MembershipTable(const TableOptions& options);

  // Epoch 1: slots coordinator_slots..slots-spares-1 hold ranks 0.., the last `spares` are
  // spares.
  const Membership& membership() const { return m_; }
  const Member& member(SlotId slot) const { return members_[slot]; }
  int32_t slots() const { return static_cast<int32_t>(members_.size()); }
  bool retired(SlotId slot) const { return members_[slot].role == Role::kRetired; }
  // The slot's application exited for good (its exit was reported).
  bool exited(SlotId slot) const { return exit_codes_[slot].has_value(); }
  // A slot that runs an agent (every slot but a dedicated coordinator's).
  bool has_agent(SlotId slot) const { return slot >= options_.coordinator_slots; }
  // The job has ended (the exit code was returned in a Decision).
  bool over() const { return state_ == State::kOver; }
  // A shutdown was broadcast; the coordinator waits for the ranks' exits.
  bool draining() const { return state_ != State::kRunning; }

  // A slot's agent said hello from `host`, with its own CUDA device (-1: none) among the
  // `gpus` of its node (before the job starts; docs/launcher.md, "GPUs").
  void Join(SlotId slot, const std::string& host, int32_t device, int32_t gpus);

  // Failures observed together (same heartbeat scan) are answered by one epoch.
  Decision Fail(const std::vector<SlotFailure>& failures);
  // The slot's application exited for good with `code`.
  Decision Exit(SlotId slot, int32_t code);

 private:
  enum class State { kRunning, kDraining, kOver };

  ControlEvent NewEvent(ControlEvent::Type type, std::vector<LogicalRank> failed,
                        std::string reason);
  void SyncRoles();
  // The device a spare on slot `spare` takes for the rank that slot `lost` held.
  int32_t DeviceFor(SlotId spare, SlotId lost) const;
  // Ranks left without a slot once spares ran out; applies the policy.
  Decision Exhausted(const std::vector<LogicalRank>& unfilled, std::vector<LogicalRank> failed,
                     std::string reason);
  std::optional<int32_t> AllExited();
  // Under kShrink: renumbers the ranks left (densely, or by whole replicas on a grid) and says
  // in `reason` who left; false when no rank is left.
  bool ShrinkRanks(const std::vector<LogicalRank>& unfilled, std::string* reason);

  TableOptions options_;
  std::vector<Member> members_;  // index: slot
  std::vector<std::optional<int32_t>> exit_codes_;
  Membership m_;
  State state_ = State::kRunning;
  std::optional<int32_t> first_bad_exit_;
};

}  // namespace rtft::control
