// Per-step protection and recovery: what keeps a data-parallel training run going, bitwise
// identical, when a rank is lost. An application declares its state once (replicated tensors,
// identical on every rank; sharded tensors, one shard per rank; objects), brackets each step,
// and calls Recover() when a collective returns kAborted. docs/protect.md describes the levels
// (L1 local snapshot in memory that outlives the process, L2 replica on the ring neighbour, L3
// checkpoint on disk) and the recovery protocol.
//
//   auto p = rtft::Protector::Create(runtime.get(), options).value();
//   p->AddReplicated({"params", DType::kFloat32, {n}, params});
//   p->AddSharded({"adam_m", DType::kFloat32, {shard}, m});
//   p->AddObject({"schedule", save, load});
//   uint64_t step = p->Start().value();         // 0, or where a spare / restart resumes
//   while (step < steps) {
//     Status s = p->BeginStep(step);             // snapshot of the state at the step's start
//     if (s.ok()) s = forward_backward(p->comm());
//     if (s.ok()) s = p->BeforeUpdate();         // fence: the snapshot is taken
//     if (s.ok()) s = update_and_allgather(p->comm());
//     if (s.ok()) s = p->EndStep();
//     if (s.ok()) { ++step; continue; }
//     if (s.code() != StatusCode::kAborted) return s;
//     step = p->Recover().value();               // the next epoch; state of `step` restored
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rtft/comm.h"
#include "rtft/export.h"
#include "rtft/runtime.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

struct ProtectOptions {
  // false: no snapshot and no replica (the step calls only watch for failure events), to measure
  // what protection costs; a failure then cannot be recovered from.
  bool enabled = true;
  // The training communicator's backend; replication always goes host to host over Gloo.
  CommBackend backend = CommBackend::kGloo;
  // Name of the training communicator ("train").
  std::string comm_name = "train";
  // L3: a persistent checkpoint every this many steps (0: RTFT_PROTECT_L3_EVERY; negative: none)
  // into `ckpt_dir` (empty: RTFT_PROTECT_CKPT_DIR; empty too: no L3).
  int64_t l3_every = 0;
  std::string ckpt_dir;
  // Where L1 and L2 live (empty: the directory dp-launch gives the application, RTFT_SHM_DIR, or
  // a private one under /dev/shm for a standalone run).
  std::string shm_dir;
  // Room for the serialized objects of one version (0: 1 MiB).
  uint64_t max_object_bytes = 0;
  // How long recovery waits for its peers at each stage (0: RTFT_COMM_CREATE_TIMEOUT_MS).
  std::chrono::milliseconds recovery_timeout{0};
};

// What Recover() did, for logs and timelines.
struct RecoveryInfo {
  uint64_t epoch = 0;        // the epoch recovered into
  uint64_t step = 0;         // the step training resumes at
  std::string source;        // "l1" (every rank from its own snapshot and replicas) or "l3"
  int world_size = 0;        // ranks of that epoch (fewer than before after a shrink)
  int ranks_fed = 0;         // ranks that received state from a peer
  uint64_t bytes_moved = 0;  // state sent to them
  double wait_event_s = 0;   // until the failure event was known
  double agree_s = 0;        // until the rollback step was agreed
  double rebuild_s = 0;      // until the next epoch's communicators were ready
  double transfer_s = 0;     // until every rank had its state
};

class RTFT_EXPORT Protector {
 public:
  static StatusOr<std::unique_ptr<Protector>> Create(Runtime* runtime,
                                                     const ProtectOptions& options = {});
  virtual ~Protector();

  // The state, declared once before Start(). Replicated tensors are identical on every rank;
  // sharded ones are this rank's shard (its size may differ between ranks). Host memory.
  virtual Status AddReplicated(TensorDesc tensor) = 0;
  virtual Status AddSharded(TensorDesc tensor) = 0;
  virtual Status AddObject(ObjectDesc object) = 0;

  // `--on-spares-exhausted shrink`: the job goes on with fewer ranks, renumbered. Recover() then
  // calls `reshard(world_size, rank)`, which resizes the application's sharded tensors for its
  // new rank and returns them, in the order they were added (same names and types), and fills
  // them from the old ranks' snapshots and replicas: each sharded tensor is the concatenation of
  // every rank's shard in rank order, before and after. Without it a shrink ends the job with an
  // error. Set before Start().
  using Reshard = std::function<StatusOr<std::vector<TensorDesc>>(int world_size, int rank)>;
  virtual Status OnShrink(Reshard reshard) = 0;

  // Begins protection and returns the step to run first: 0 for a fresh job; for a warm spare
  // just activated or a process restarted on its slot, the step recovery agreed on, its state
  // restored; for a job started again after `checkpoint-and-exit`, the newest L3 step.
  virtual StatusOr<uint64_t> Start() = 0;
  // The training communicator of the current epoch (valid after Start and after Recover).
  virtual Communicator* comm() = 0;

  // Snapshot of the state as it is at the start of `step` (L1), then its replica to the ring
  // neighbour (L2), both in the background.
  virtual Status BeginStep(uint64_t step) = 0;
  // Returns once the snapshot is taken: call before the state changes (the optimizer update).
  virtual Status BeforeUpdate() = 0;
  // The step is done (progress for dp-launch's watchdog; L3 when it is due). kAborted when a
  // failure event came during the step.
  virtual Status EndStep() = 0;

  // Paused, the steps that begin take no snapshot and send no replica (and write no L3) until
  // Pause(false); failure events are still watched. A failure meanwhile rolls back to the last
  // step protected before the pause, so more than one step runs again. For phases that do not
  // change the state, and for `rtft-bench protect`, which alternates protected and paused steps
  // in one run to measure what protection costs. Call between steps.
  virtual void Pause(bool paused) = 0;

  // After kAborted (or a failure event): waits for the new epoch, agrees with every rank on the
  // newest step whose state is complete, builds the next epoch's communicators, feeds a spare or
  // a restarted rank its state, restores that step everywhere and returns it. A failure during
  // recovery restarts it in the next epoch.
  virtual StatusOr<uint64_t> Recover() = 0;
  virtual const RecoveryInfo& last_recovery() const = 0;

  // Writes the current step's snapshot to L3 now and waits until it is committed (what
  // `--on-spares-exhausted checkpoint-and-exit` asks of the application).
  virtual Status CheckpointNow() = 0;
};

}  // namespace rtft
