// The Protector behind include/rtft/protect.h: the step bracket (protector.cc) and recovery
// (recovery.cc) over the L1 snapshot, the L2 replicator and the runtime's events and store.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rtft/checkpoint.h"
#include "rtft/protect.h"
#include "runtime/protect/replica.h"
#include "runtime/protect/snapshot.h"

namespace rtft::protect {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Where one rank's shard of a sharded tensor sits in the concatenation of every rank's (L3).
struct ShardPlace {
  int64_t global = 0;
  int64_t offset = 0;
};
// The L3 object that holds the serialized objects of a step.
constexpr const char* kObjectsName = "protect.objects";

// What every rank publishes when a recovery starts, and what the plan is made of.
struct RankState {
  int rank = -1;
  // The rank and world size its L1 and L2 were laid out for (differ from the new epoch's after a
  // shrink; -1 and 0: it holds no state of this job yet).
  int was = -1;
  int was_world = 0;
  uint64_t layout_hash = 0;  // of its replicated tensors: the same on every rank of a job
  std::vector<uint64_t> l1;  // complete L1 steps
  std::vector<std::pair<int, uint64_t>> l2;  // (owner, step) of complete replicas
};

// Who feeds whom, decided identically on every rank from the published states.
struct RecoveryPlan {
  bool ok = false;
  uint64_t step = 0;
  std::vector<int> needy;      // ranks without a usable L1 snapshot of `step`
  std::vector<int> holder;     // per needy rank: the rank holding its replica
  int replicated_source = -1;  // a rank whose L1 has `step`
  std::string why;             // when !ok
};
// `layout_hash`: this rank's replicated-tensor hash; ranks that publish another hold nothing
// usable.
RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks, uint64_t layout_hash);
// After a shrink: `old` indexed by the ranks of the world the state was laid out for, the lost
// ones holding nothing. The newest step that every survivor holds in its own L1 and whose replica
// of every lost rank is complete on its old right neighbour; `needy` and `holder` in old ranks.
RecoveryPlan PlanShrink(std::vector<RankState> old, const std::vector<bool>& survived,
                        uint64_t layout_hash);
// The JSON a rank publishes; anything malformed decodes as holding nothing.
std::string EncodeRankState(const RankState& state);
RankState DecodeRankState(const std::string& text, int rank);

class ProtectorImpl final : public Protector {
 public:
  ProtectorImpl(Runtime* runtime, const ProtectOptions& options);
  ~ProtectorImpl() override;

  Status AddReplicated(TensorDesc tensor) override;
  Status AddSharded(TensorDesc tensor) override;
  Status AddObject(ObjectDesc object) override;
  StatusOr<uint64_t> Start() override;
  Communicator* comm() override { return train_.get(); }
  Status BeginStep(uint64_t step) override;
  Status BeforeUpdate() override;
  Status EndStep() override;
  void Pause(bool paused) override { paused_ = paused; }
  StatusOr<uint64_t> Recover() override;
  const RecoveryInfo& last_recovery() const override { return info_; }
  Status CheckpointNow() override;
  Status OnShrink(Reshard reshard) override;

 private:
  Status Open();
  Status AdoptOldLayout();
  // For the shrink: every rank gets the old world's shard sizes (counts_) from one that has them.
  Status ShareOldCounts(int old_world);
  Status BuildComms(uint64_t epoch);
  Status JoinCapture();
  void StopReplication();
  Status Aborted() const;
  uint64_t EventEpoch() const;
  StatusOr<uint64_t> RecoverInto(uint64_t epoch);
  StatusOr<uint64_t> RecoverFrom(uint64_t epoch, Clock::time_point deadline);
  StatusOr<std::vector<RankState>> Gather(uint64_t epoch, const RankState& mine);
  Status Transfer(const RecoveryPlan& plan, uint64_t epoch);
  // Shrink (shrink.cc): the survivors of a smaller world redistribute the sharded tensors.
  StatusOr<uint64_t> Shrink(uint64_t epoch, const std::vector<RankState>& all,
                            Clock::time_point t0);
  StatusOr<std::vector<TensorDesc>> NewShards(int world, int rank) const;
  Status Redistribute(const RecoveryPlan& plan, const std::vector<int>& new_of_old,
                      std::vector<TensorDesc>& shards);
  // The state is laid out again for new shards: L1 re-laid out (empty), L2 emptied, shards placed.
  Status Relayout(const std::vector<TensorDesc>& shards);
  size_t ObjectRoom() const { return o_.max_object_bytes ? o_.max_object_bytes : (1u << 20); }
  // L3 (l3.cc).
  Status ResolveL3();
  Status PlaceShards();
  CheckpointOptions L3Options(int rank, int world) const;
  Status OpenL3();
  void RetireL3();
  Status MaybeCheckpoint(uint64_t step, bool now);
  Status WaitL3Area(uint64_t step);
  std::unique_ptr<StateProvider> OwnView(uint64_t step) const;
  StatusOr<std::unique_ptr<StateProvider>> ReplicaView(uint64_t step, int lost) const;
  // `--on-spares-exhausted checkpoint-and-exit`: the survivors write one complete L3 version,
  // the holders of the lost ranks' replicas writing those ranks' files.
  Status FinalCheckpoint();
  Status ShutDown();
  StatusOr<uint64_t> RestoreL3(uint64_t epoch);

  Runtime* rt_;
  ProtectOptions o_;
  milliseconds recovery_timeout_{0};
  Layout layout_;
  bool started_ = false;
  std::string dir_;
  bool owned_dir_ = false;
  std::unique_ptr<Snapshot> l1_;
  std::unique_ptr<ReplicaStore> l2_;
  std::unique_ptr<Communicator> train_;
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<CheckpointEngine> l3_;
  std::string ckpt_dir_;
  uint64_t l3_every_ = 0;
  std::vector<ShardPlace> places_;
  std::vector<std::vector<int64_t>> counts_;  // [rank][sharded tensor]: every rank's shard sizes
  // The rank and world size L1, L2 and counts_ are laid out for (PlaceShards).
  int held_rank_ = -1;
  int held_world_ = 0;
  Reshard reshard_;

  // The step in progress: its capture runs on capture_; BeforeUpdate joins it.
  static constexpr uint64_t kNoStep = ~uint64_t{0};
  uint64_t step_ = 0;
  uint64_t restored_step_ = kNoStep;  // the step the last recovery restored
  uint64_t l3_pending_ = kNoStep;     // the L3 version whose copy out of L1 may be running
  bool in_step_ = false;
  bool paused_ = false;  // Pause(): steps begin without a snapshot
  // AdoptOldLayout(): the sharded entries describe an old-world snapshot, not the application's
  // memory, until the shrink lays the state out again.
  bool shards_stale_ = false;
  std::thread capture_;
  Status capture_status_;

  // Failure events, as they arrive (the runtime's listener).
  uint64_t listener_ = 0;
  std::atomic<uint64_t> event_epoch_{0};
  std::atomic<bool> shutdown_{false};
  std::mutex event_mu_;
  std::optional<FailureEvent> shutdown_event_;  // the last shutdown event (under event_mu_)

  RecoveryInfo info_;
};

}  // namespace rtft::protect
