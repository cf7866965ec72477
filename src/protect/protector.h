// The Protector behind include/rtft/protect.h: a facade over parts that each own their state and
// their thread (docs/protect.md, "Code"): the L1 capture worker (capture.h), the L2 replicator
// (replicator.h), the recovery planner (plan.h), the L3 writer (l3_writer.h); this class keeps
// the phase of the step bracket and drives recovery (recover.cc) and the shrink (shrink.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protect/capture.h"
#include "protect/grid.h"
#include "protect/l3_views.h"
#include "protect/l3_writer.h"
#include "protect/layout.h"
#include "protect/plan.h"
#include "protect/replica_store.h"
#include "protect/replicator.h"
#include "protect/shard_table.h"
#include "protect/snapshot.h"
#include "rtft/protect.h"

namespace rtft::protect {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class ProtectorImpl final : public Protector {
 public:
  ProtectorImpl(Runtime* runtime, const ProtectOptions& options);
  ~ProtectorImpl() override;

  Status Protect(std::shared_ptr<StateProvider> state, ResizeState resize) override;
  StatusOr<RunResult> Run(uint64_t end_step, const StepFns& fns) override;  // driver.cc
  StatusOr<uint64_t> Start() override;
  Communicator* comm() override { return train_.get(); }
  Status BeginStep(uint64_t step) override;
  Status BeforeUpdate() override;
  Status EndStep() override;
  StatusOr<uint64_t> Recover() override;
  const RecoveryInfo& last_recovery() const override { return info_; }
  const ProtectStats& stats() const override {
    stats_.replica_bytes = replica_counters_->bytes;
    stats_.replica_s = replica_counters_->micros * 1e-6;
    return stats_;
  }
  void Pause(bool paused) override { paused_ = paused; }
  Status CheckpointNow() override;

 private:
  // Where the bracket is. kDescribing until Start(); a step moves kReady -> kInStep (BeginStep)
  // -> kUpdating (BeforeUpdate) -> kReady (EndStep); a failure anywhere goes to recovery, which
  // leaves it kReady.
  enum class Phase { kDescribing, kReady, kInStep, kUpdating };
  // What the sharded entries of the layout describe: the application's memory, or (a process
  // restarted in the middle of a shrink) an old world's snapshot that only the shrink may use.
  enum class Shards { kApplication, kOldWorldSnapshot };

  // protector.cc
  Status Open();
  Status AdoptOldLayout();
  Status BuildComms(uint64_t epoch);
  // Every rank's shard coordinates for the layout as it is now (the replication communicator).
  Status PlaceShards();
  // The L3 engine of this rank and world (recovery: opened in the background, L3Writer).
  Status OpenL3(L3Writer::When when = L3Writer::When::kNow);
  uint64_t EventEpoch() const;
  Status Aborted() const;
  size_t ObjectRoom() const { return o_.max_object_bytes ? o_.max_object_bytes : (1u << 20); }
  bool Protected(uint64_t step) const;
  // step.cc
  Status StartCapture(uint64_t step);
  Status MaybeCheckpoint(uint64_t step, bool now);
  // recover.cc
  StatusOr<uint64_t> RecoverFrom(uint64_t epoch, Clock::time_point deadline);
  StatusOr<uint64_t> RecoverInto(uint64_t epoch);
  bool WaitForEpochAfter(uint64_t epoch, Clock::time_point deadline) const;
  RankState Mine(int rank) const;
  StatusOr<RecoveryPlan> AgreeFinal(uint64_t epoch, int me, const std::vector<bool>& lost);
  StatusOr<AgreedPlan> Agree(uint64_t epoch, const RankState& mine, int world);
  Status Transfer(const RecoveryPlan& plan, uint64_t epoch);
  Status Restored(uint64_t step, bool sharded);
  Status ShutDown();
  void StopReplication();
  // shrink.cc
  struct ResizedState {
    Layout layout;
    std::shared_ptr<StateProvider> state;
  };
  // Whether the job's new world can hold the grid: whole replicas of the default order.
  Status CanShrinkGrid(const RuntimeInfo& now) const;
  StatusOr<uint64_t> Shrink(uint64_t epoch, const ShrinkDecision& decision, int world,
                            Clock::time_point t0);
  StatusOr<uint64_t> ShrinkFromMemory(uint64_t epoch, const RecoveryPlan& plan,
                                      const std::vector<int>& new_of_old, ResizedState resized,
                                      Clock::time_point t0);
  ShrinkPlace NewPlace(int world, int rank) const;
  StatusOr<ResizedState> Resize(const ShrinkPlace& place) const;
  Status CheckRowSplit() const;
  Status Redistribute(const RecoveryPlan& plan, const std::vector<int>& new_of_old,
                      const Layout& resized);
  Status Relayout(ResizedState resized);
  // placement.cc
  Status ShareOldTable(int old_world);
  // l3.cc
  Status FinalCheckpoint();
  Status WriteFiles(uint64_t step, int world, const std::vector<std::pair<int, AreaView>>& files);
  StatusOr<uint64_t> RestoreL3(uint64_t epoch);

  Runtime* rt_;
  ProtectOptions o_;
  milliseconds recovery_timeout_{0};
  int device_ = 0;      // the CUDA device of the training communicator and step
  int l2_streams_ = 2;  // RTFT_PROTECT_L2_STREAMS: the replicator's communicators
  std::shared_ptr<StateProvider> state_;
  ResizeState resize_;
  Layout layout_;
  Phase phase_ = Phase::kDescribing;
  Shards shards_ = Shards::kApplication;
  std::string dir_;
  bool owned_dir_ = false;
  std::unique_ptr<Snapshot> l1_;
  std::unique_ptr<ReplicaStore> l2_;
  std::unique_ptr<Capturer> capture_;
  std::unique_ptr<Communicator> train_;
  // The grid of the epoch, and its group communicators (null where the degree is 1, and all of
  // them when the grid is data parallel only: then the data-parallel group is train_).
  GridMap grid_;
  std::unique_ptr<Communicator> tensor_, pipeline_, data_;
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<L3Writer> l3_;
  // Every rank's shards in the world L1 and L2 are laid out for (held_world_ ranks, this one
  // being held_rank_; -1 and 0 before the first placement).
  ShardTable table_;
  int held_rank_ = -1;
  int held_world_ = 0;

  uint64_t step_ = 0;                      // the step in progress, or the last one
  uint64_t next_step_ = 0;                 // the step to run next (Start() once begun)
  bool step_protected_ = false;            // whether its BeginStep took a snapshot
  std::optional<uint64_t> restored_step_;  // the step the last recovery restored
  bool paused_ = false;

  // Failure events, as they arrive (the runtime's listener).
  uint64_t listener_ = 0;
  std::atomic<uint64_t> event_epoch_{0};
  std::atomic<bool> shutdown_{false};
  mutable std::mutex event_mu_;
  mutable std::condition_variable event_cv_;
  std::optional<FailureEvent> shutdown_event_;  // the last shutdown event (under event_mu_)

  RecoveryInfo info_;
  mutable ProtectStats stats_;
  std::shared_ptr<ReplicaCounters> replica_counters_ = std::make_shared<ReplicaCounters>();
};

}  // namespace rtft::protect
