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

// What every rank publishes when a recovery starts, and what the plan is made of.
struct RankState {
  int rank = -1;
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
  StatusOr<uint64_t> Recover() override;
  const RecoveryInfo& last_recovery() const override { return info_; }
  Status CheckpointNow() override;

 private:
  Status Open();
  Status BuildComms(uint64_t epoch);
  Status JoinCapture();
  void StopReplication();
  Status Aborted() const;
  uint64_t EventEpoch() const;
  StatusOr<uint64_t> RecoverInto(uint64_t epoch);
  StatusOr<uint64_t> RecoverFrom(uint64_t epoch, Clock::time_point deadline);
  StatusOr<std::vector<RankState>> Gather(uint64_t epoch, const RankState& mine);
  Status Transfer(const RecoveryPlan& plan, uint64_t epoch);
  Status MaybeCheckpoint(uint64_t step, bool now);
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
  uint64_t l3_every_ = 0;

  // The step in progress: its capture runs on capture_; BeforeUpdate joins it.
  static constexpr uint64_t kNoStep = ~uint64_t{0};
  uint64_t step_ = 0;
  uint64_t restored_step_ = kNoStep;  // the step the last recovery restored
  bool in_step_ = false;
  std::thread capture_;
  Status capture_status_;

  // Failure events, as they arrive (the runtime's listener).
  uint64_t listener_ = 0;
  std::atomic<uint64_t> event_epoch_{0};
  std::atomic<bool> shutdown_{false};

  RecoveryInfo info_;
};

}  // namespace rtft::protect
