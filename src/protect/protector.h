// The Protector behind include/rtft/protect.h: a facade over parts that each own their state and
// their thread (docs/protect.md, "Code"): what the rank holds and the epoch's communicators
// (parts.h), the L1 capture worker (capture.h), the L2 replicator (replicator.h), the L3 writer
// (l3_writer.h). This class keeps the phase of the step bracket (protector.cc, step.cc), runs a
// Recovery (recovery.h) when a step fails and installs what it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "protect/capture.h"
#include "protect/events.h"
#include "protect/parts.h"
#include "protect/recovery.h"
#include "rtft/protect.h"

namespace rtft::protect {

class ProtectorImpl final : public Protector {
 public:
  ProtectorImpl(Runtime* runtime, const ProtectOptions& options);
  ~ProtectorImpl() override;

  Status Protect(std::shared_ptr<StateProvider> state, ResizeState resize) override;
  StatusOr<RunResult> Run(uint64_t end_step, const StepFns& fns) override;  // RunSteps
  StatusOr<uint64_t> Start() override;
  Communicator* comm() override { return epoch_.train.get(); }
  Status BeginStep(uint64_t step) override;
  Status BeforeUpdate() override;
  Status EndStep() override;
  StatusOr<uint64_t> Recover() override;
  const RecoveryInfo& last_recovery() const override { return info_; }
  const ProtectStats& stats() const override {
    stats_.replica_bytes = replica_counters_->bytes;
    stats_.replica_s = replica_counters_->micros * 1e-6;
    if (held_.l1) {
      stats_.l1_copied_bytes = held_.l1->copied_bytes();
      stats_.l1_hashed_bytes = held_.l1->hashed_bytes();
    }
    return stats_;
  }
  void Pause(bool paused) override { paused_ = paused; }
  Status CheckpointNow() override;

  // For the step driver (driver.cc), which runs on the bracket above.
  bool started() const { return phase_ != Phase::kDescribing; }
  uint64_t next_step() const { return next_step_; }
  bool step_protected() const { return step_protected_; }
  // What a step's functions are given (all but `recovered`).
  StepContext Context(uint64_t step) const;
  void ReportDeviceError(const std::string& detail) { (void)rt_->ReportDeviceError(detail); }
  int64_t replay_every() const { return settings_.replay_every; }
  bool check_finite() const { return settings_.check_finite; }
  // The step in progress was replayed and its gradients agreed (ComputeStep): its L3 version's
  // manifests say so (docs/format.md, "Certification"), and once it ends, the state it made is
  // the newest the replays vouch for.
  void MarkReplayed() { replay_.step_replayed = true; }
  // A replay found a device faulty (ComputeStep): the steps since the newest state the replays
  // vouch for may hold its wrong gradients, so the next recovery goes back no further than that.
  void NoteFaulty();
  // The capture in flight over (a step failed for good); its status is the step's error's to give.
  void EndCapture() { (void)capture_->Wait(); }

 private:
  // Where the bracket is. kDescribing until Start(); a step moves kReady -> kInStep (BeginStep)
  // -> kUpdating (BeforeUpdate) -> kReady (EndStep); a failure anywhere goes to recovery, which
  // leaves it kReady.
  enum class Phase { kDescribing, kReady, kInStep, kUpdating };

  // protector.cc
  Status Open();
  Parts parts();
  Status Aborted() const;
  bool Protected(uint64_t step) const;
  // A failure during recovery moves the job to another epoch: start over there.
  StatusOr<uint64_t> RecoverFrom(uint64_t epoch, Clock::time_point deadline);
  // What a recovery returned: its epoch, its measures, the step it restored.
  StatusOr<uint64_t> Install(Recovered recovered);
  Status ShutDown();
  Status FinalCheckpoint();
  void StopReplication();
  // step.cc
  Status StartCapture(uint64_t step);
  // A planned swap asked this rank to stop at `step` (docs/protect.md, "Stragglers"): once the
  // step's snapshot is whole and replicated, it waits for the swap's epoch (kAborted: recover,
  // which restores this very step) or for the swap to be called off (Ok: the step goes on).
  Status PauseForSwap(uint64_t step);
  // The replicated tensors' cross-check found a corrupt copy (step.cc).
  Status Repair(const Corruption& bad);
  Status MaybeCheckpoint(uint64_t step, bool now);

  Runtime* rt_;
  Settings settings_;
  Held held_;
  std::unique_ptr<L3Writer> l3_;
  Epoch epoch_;
  EventWatch events_;  // failure events, as they arrive (the runtime's listener)
  std::unique_ptr<Capturer> capture_;
  Phase phase_ = Phase::kDescribing;
  uint64_t step_ = 0;            // the step in progress, or the last one
  uint64_t next_step_ = 0;       // the step to run next (Start() once begun)
  bool step_protected_ = false;  // whether its BeginStep took a snapshot
  // What the replays of steps vouched for (docs/protect.md, "Replay"): whether the step in
  // progress was replayed and agreed; the newest step whose state they vouch for (the state the
  // last verified update made, or the one this rank started or recovered from); and, once a
  // device was found faulty, that step for the next recovery to go back to (a ceiling).
  struct ReplayMarks {
    bool step_replayed = false;
    std::optional<uint64_t> vouched;
    std::optional<uint64_t> ceiling;
  } replay_;
  std::optional<uint64_t> restored_step_;  // the step the last recovery restored from L1
  bool paused_ = false;
  RecoveryInfo info_;
  mutable ProtectStats stats_;
  std::shared_ptr<ReplicaCounters> replica_counters_ = std::make_shared<ReplicaCounters>();
};

// driver.cc: the bracket and the recovery every protected loop needs, once.
StatusOr<RunResult> RunSteps(ProtectorImpl* p, uint64_t end_step, const StepFns& fns);
// What the replay of a step found, the same on every rank of the data-parallel group.
struct ReplayOutcome {
  // The step was replayed and the gradients it reduced are the ones its replays agreed on.
  bool replayed = false;
  // A rank's gradients disagreed twice with their replays: its device is taken for faulty (the
  // step fails: kDeviceLost on that rank, kAborted on the others).
  bool faulty = false;
};
// replay.cc: a step's compute, `compute` or `local` then `reduce`, with the replay of the step by
// a peer every `every` steps (docs/protect.md, "Replay").
Status ComputeStep(StepContext& ctx, const StepFns& fns, int64_t every, bool check_finite,
                   ReplayOutcome* outcome);

}  // namespace rtft::protect
