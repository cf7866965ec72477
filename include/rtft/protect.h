// Per-step protection and recovery: what keeps a data-parallel training run (or a solver) going,
// bitwise identical, when a rank is lost. The application describes its state once, with the
// same state providers the checkpoint engine takes, and runs its steps through Run(), which hides
// the snapshots, the recovery and the next epoch's communicators:
//
//   auto p = rtft::Protector::Create(runtime.get()).value();
//   p->Protect(state);                        // tensors: replicated, or shards (ShardCoords)
//   auto done = p->Run(steps, {compute, update});
//   // compute(ctx): forward, backward, the gradients' collectives on ctx.comm
//   // update(ctx):  the optimizer step and what follows it (the parameters' all-gather)
//
// docs/protect.md describes the levels (L1 local snapshot in memory that outlives the process,
// L2 replica on the ring neighbour, L3 checkpoint on disk) and the recovery protocol.
// examples/03_hot_swap is a complete trainer.
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

// How the ranks of a job are laid out for tensor x pipeline x data parallelism: T ranks share
// each layer's matrices, P stages share the layers, and D = world / (T * P) data-parallel
// replicas of each (t, p) partition hold the same parameters. Rank = t + T * (d + D * p)
// (Megatron-LM's default order: tensor, then data, then pipeline) unless `ranks` maps them.
struct Grid {
  int tensor = 1;    // T
  int pipeline = 1;  // P
  // Optional: ranks[t + T * (d + D * p)] is the rank at (t, p, d), a permutation of the world.
  std::vector<int> ranks;
};

// One rank's place in a grid, and the grid's degrees.
struct GridPlace {
  int t = 0, p = 0, d = 0;
  int tensor = 1, pipeline = 1, data = 1;
};
// Where `rank` of `world` sits; InvalidArgument when T * P does not divide the world or `ranks`
// is no permutation of it.
RTFT_EXPORT StatusOr<GridPlace> PlaceInGrid(const Grid& grid, int world, int rank);
// The rank at (t, p, d) of a world of `world` ranks.
RTFT_EXPORT StatusOr<int> RankInGrid(const Grid& grid, int world, int t, int p, int d);

struct ProtectOptions {
  // false: no snapshot and no replica (the steps only watch for failure events), to measure what
  // protection costs; a failure then cannot be recovered from.
  bool enabled = true;
  // The training communicator's backend; replication always goes host to host over Gloo. NCCL
  // runs on `device`.
  CommBackend backend = CommBackend::kGloo;
  // The CUDA device of this rank's training communicator and step (-1: the runtime's,
  // RuntimeInfo::device).
  int device = -1;
  // The CUDA stream (a cudaStream_t) the application computes on, passed to the step functions:
  // a snapshot of device tensors waits for the work queued on it before it copies them (null:
  // the legacy default stream).
  void* stream = nullptr;
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
  // The layout of the ranks (default: data parallel only). The ring of replicas runs inside each
  // data-parallel group (the ranks of one (t, p)), and a spare that takes (t, p, d) gets the
  // replicated tensors from a live (t, p, d') and its shards from its ring neighbour. Each (t, p)
  // partition describes its own tensors (names unique to the partition); the ranks of one
  // data-parallel group must describe the same state.
  Grid grid;
  // The replay of a step by a peer (docs/protect.md, "Replay"): every this many steps (0:
  // RTFT_PROTECT_REPLAY_EVERY, off by default; negative: never), each rank also runs its left
  // neighbour's local compute (StepFns::local) and the gradients' digests are compared before
  // the reduction. Needs StepFns::local and ::reduce, host gradients, a data-parallel layout.
  // A device found faulty sends the job back to the newest state the replays vouch for (memory,
  // else the newest L3 version at or before it: keep the L3 interval a multiple of this).
  int64_t replay_every = 0;
  // The check for non-finite gradients (docs/protect.md, "Non-finite gradients"): 0:
  // RTFT_PROTECT_CHECK_FINITE (off by default); 1: on; -1: off. Every step, before the
  // reduction, each rank looks for a NaN or an infinity in the gradients StepFns::local names
  // (or takes StepContext::nonfinite) and the data-parallel group shares one flag per rank; a
  // step with one is replayed as a replayed step is, so a device fault is caught (its slot
  // retired when its rank computes it twice); gradients whose replay is not finite either end
  // Run() with FAILED_PRECONDITION before the update: the model's own, not a device's. Needs
  // StepFns::local and ::reduce.
  int check_finite = 0;
  // Which steps take a snapshot (empty: every step). A failure rolls back to the last step that
  // took one, so more than one step may run again. `rtft-bench protect` alternates protected and
  // unprotected blocks of steps in one run to measure what protection costs.
  std::function<bool(uint64_t step)> protect_step;
};

// What a recovery did, for logs and timelines.
struct RecoveryInfo {
  uint64_t epoch = 0;  // the epoch recovered into
  uint64_t step = 0;   // the step training resumes at
  // "l1" (every rank from its own snapshot and replicas), "l3", or "start" (a rank lost before
  // the first snapshot: step 0 again, from the state each rank built; docs/protect.md)
  std::string source;
  int world_size = 0;        // ranks of that epoch (fewer than before after a shrink)
  int ranks_fed = 0;         // ranks that received state from a peer
  uint64_t bytes_moved = 0;  // state sent to them
  double wait_event_s = 0;   // until the failure event was known
  double agree_s = 0;        // until the rollback step was agreed
  double rebuild_s = 0;      // until the next epoch's communicators were ready
  double transfer_s = 0;     // until every rank had its state
  double total_s = 0;        // the whole recovery, as this rank saw it
  // A shutdown (the job is ending) that asked for a checkpoint: it is written.
  bool final_checkpoint = false;
};

// What protection cost the training thread, summed over the steps that took a snapshot (since the
// Protector was made): its waits at the step's begin for the last step's replica (L2) and at the
// fence before the update for the step's own capture (L1).
struct ProtectStats {
  uint64_t protected_steps = 0;
  double replica_wait_s = 0;
  double fence_wait_s = 0;
  uint64_t state_bytes = 0;  // one version of this rank's protected state (tensors)
  // L2: the replica bytes this rank sent and received, and the time its exchanges took (on the
  // replicator's threads, from the first header to the barrier): their quotient is L2's speed.
  uint64_t replica_bytes = 0;
  double replica_s = 0;
  // L1's host memory traffic: the bytes this rank's captures wrote into its snapshot (tensors and
  // objects; a host tensor's copy also reads as many from the application's memory) and the
  // bytes its checksums read (each capture's seal and each verification).
  uint64_t l1_copied_bytes = 0;
  uint64_t l1_hashed_bytes = 0;
};

// What each step function sees.
struct StepContext {
  uint64_t step = 0;
  uint64_t epoch = 0;
  // This process's logical rank and the ranks of the epoch (a shrink renumbers them).
  int rank = 0;
  int world_size = 1;
  // The epoch's training communicator (every rank of the epoch). Aborted at a failure: its calls
  // then return kAborted, which the step function returns.
  Communicator* comm = nullptr;
  // This rank's place in the grid, and the epoch's communicator of each of its groups, ranked by
  // their coordinate: the tensor group (the T ranks of (p, d)), the pipeline group (the P stages
  // of (t, d)) and the data-parallel group (the D replicas of (t, p)). Null when the degree is 1;
  // the data-parallel one is `comm` when the grid is data parallel only.
  GridPlace place;
  Communicator* tensor = nullptr;
  Communicator* pipeline = nullptr;
  Communicator* data = nullptr;
  // The CUDA device and stream of the step (ProtectOptions::device and ::stream).
  int device = 0;
  void* stream = nullptr;
  // Set on the first step after a recovery (a spare's, a restarted process's, or every rank's
  // after a failure); null otherwise.
  const RecoveryInfo* recovered = nullptr;
  // For StepFns::local. The data-parallel index whose data the step uses: place.d, but the
  // replayed rank's while `replaying` (the compute must be a function of the protected state,
  // `step` and `data_rank` alone: its data and random numbers drawn from them).
  int data_rank = 0;
  bool replaying = false;
  // Set by StepFns::local: the gradient buffer it wrote (host memory), which the replay digests,
  // and the type of its elements (uint8: bytes of no one type).
  const void* gradients = nullptr;
  size_t gradient_bytes = 0;
  DType gradient_dtype = DType::kUInt8;
  // Set by StepFns::local: the application found its loss or gradients not finite (the check
  // for non-finite gradients takes it as it takes a NaN in the named buffer).
  bool nonfinite = false;
};

using StepFn = std::function<Status(StepContext&)>;
struct StepFns {
  // Forward, backward and the gradients' collectives: reads the protected state, never changes it.
  StepFn compute;
  // Changes the state (the optimizer update, then the parameters' all-gather): runs once the
  // step's snapshot is taken.
  StepFn update;
  // Optional: `compute` in two parts, which the replay of steps by a peer needs (then `compute`
  // may be empty). `local`: forward and backward into a gradient buffer it names in
  // ctx.gradients, from the data of ctx.data_rank, with no data-parallel collective (in a grid,
  // the tensor and pipeline groups' own, which every rank of the replica runs alike). `reduce`:
  // the gradients' collectives and what follows them.
  StepFn local = nullptr;
  StepFn reduce = nullptr;
};

// kDone (every step up to the end ran) or kShutdown (the job is ending: no spare was left, or
// dp-launch was told to stop; exit 0): rtft/enum_list.h.
enum class RunOutcome : uint8_t {
#define RTFT_RUN_OUTCOME(id, name, value, meaning) id = value,
#include "rtft/enum_list.h"
#undef RTFT_RUN_OUTCOME
};
RTFT_EXPORT const char* RunOutcomeName(RunOutcome outcome);

struct RunResult {
  RunOutcome outcome = RunOutcome::kDone;
  uint64_t next_step = 0;     // the first step not run (the end step when done)
  bool checkpointed = false;  // kShutdown: the L3 checkpoint the job asked for is written
};

// After a shrink (`--on-spares-exhausted shrink`: no spare left, the job goes on with fewer
// ranks), where this rank's shards are now. The Protector computes it: each sharded tensor's
// first dimension split evenly over the new ranks in rank order (EvenShard in rtft/state.h).
struct ShrinkPlace {
  int rank = 0;
  int world_size = 0;
  // One per sharded tensor, in the order described: name, dtype, shape and shard coordinates of
  // the new shard; `data` is null.
  std::vector<TensorDesc> shards;
};
// Describes the state again with shard buffers of the new sizes (same names and types; the
// replicated tensors and objects as before): the Protector fills the new shards from the old ones.
// An application whose optimizer holds the shards (OffloadOptimizer) creates a new one here.
using ResizeState = std::function<StatusOr<std::shared_ptr<StateProvider>>(const ShrinkPlace&)>;

class RTFT_EXPORT Protector {
 public:
  static StatusOr<std::unique_ptr<Protector>> Create(Runtime* runtime,
                                                     const ProtectOptions& options = {});
  virtual ~Protector();

  // The state, described once, before the first step: tensors without shard coordinates are
  // replicated (identical on every rank: the parameters); tensors with ShardCoords are this
  // rank's shard of a tensor sharded over the ranks (ZeRO optimizer state); objects are small
  // serialized state. Host or device memory (a device tensor's pointer must be of its device).
  // After a restore the provider's Restored() runs. `resize`
  // lays the state out for fewer ranks after a shrink; without it a shrink ends the job with an
  // error (run with --on-spares-exhausted checkpoint-and-exit instead).
  virtual Status Protect(std::shared_ptr<StateProvider> state, ResizeState resize = nullptr) = 0;

  // Runs steps up to `end_step` (exclusive), from Start()'s step: 0 for a new job, the step
  // recovery agreed on for a spare or a restarted process, the newest L3 step for a job started
  // again after checkpoint-and-exit (called again, it goes on from where it stopped). A kAborted
  // from a step function or from protection recovers inside the call and runs on from the agreed
  // step; a shutdown is an outcome, not an error. Other errors come back as the status
  // (kDataLoss: no state to resume from; kDeviceLost, reported to dp-launch first so that a
  // spare takes the rank). Once it has returned, nothing reads the protected state until the
  // next call; between steps of the bracket below the state is read in the background, so it
  // must outlive the Protector.
  virtual StatusOr<RunResult> Run(uint64_t end_step, const StepFns& fns) = 0;

  // ---- The step bracket, for codes that drive their own loop (the C API, solvers) ----------
  // Begins protection and returns the step to run first; once begun, the step to run next.
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
  // After kAborted: waits for the new epoch, agrees with every rank on the newest step whose
  // state is complete, builds the next epoch's communicators, feeds a spare or a restarted rank
  // its state, restores that step everywhere and returns it. kShutdown when the job is ending
  // (after the checkpoint it asked for); a failure during recovery restarts it in the next epoch.
  virtual StatusOr<uint64_t> Recover() = 0;
  virtual const RecoveryInfo& last_recovery() const = 0;
  virtual const ProtectStats& stats() const = 0;
  // Paused, the steps that begin take no snapshot (as ProtectOptions::protect_step, by hand).
  virtual void Pause(bool paused) = 0;
  // Writes the current step's snapshot to L3 now and waits until it is committed.
  virtual Status CheckpointNow() = 0;
};

}  // namespace rtft
