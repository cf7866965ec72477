// Vocabulary shared by the coordinator, the agents (dp-launch) and the application's runtime:
// slots, logical ranks, epochs, roles, failures and the policies that answer them
// (docs/architecture.md, "Failure handling"). Plain data only; the wire encoding is in messages.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rtft::control {

// A slot is one dp-launch process (one per mpirun/srun task), fixed for the whole job.
using SlotId = int32_t;
// The rank the application sees; a spare slot takes over the logical rank of a failed slot.
using LogicalRank = int32_t;
constexpr LogicalRank kNoRank = -1;

enum class Role : uint8_t {
  kActive = 0,       // started with a logical rank
  kSpare = 1,        // warm standby, no logical rank yet
  kActivated = 2,    // a spare that was given a failed slot's logical rank
  kRestarted = 3,    // the application restarted on the same slot after a transient failure
  kRetired = 4,      // permanently failed or released; takes no further part
  kCoordinator = 5,  // runs only the coordinator (--coordinator-slot dedicated): no agent, no rank
};
const char* RoleName(Role role);

enum class FailureKind : uint8_t {
  kProcessCrash = 0,  // the application died (signal or non-zero exit), its agent is alive
  kHang = 1,          // no step progress within the watchdog period; the agent killed it
  kDeviceError = 2,   // the runtime reported a sticky CUDA error / lost GPU
  kSlotLost = 3,      // the agent's heartbeats stopped (agent or node gone)
  kRepeated = 4,      // the same slot failed more often than allowed
  kStraggler = 5,     // its rank's own work per step is persistently slower than its peers'
  kUnhealthy = 6,     // the slot's health check failed (a spare: it leaves the pool)
  kCorrupt = 7,       // a copy of replicated state was corrupt: every rank recovers, none moves
};
const char* FailureKindName(FailureKind kind);

enum class FailureClass : uint8_t {
  kTransient = 0,  // restart the application on the same slot
  kPermanent = 1,  // give the logical rank to a spare
};

enum class SparesExhaustedPolicy : uint8_t {
  kShrink = 0,             // continue with fewer data-parallel ranks
  kCheckpointAndExit = 1,  // every rank writes a persistent checkpoint, then the job ends (exit 0)
  kFail = 2,               // the job ends with an error
};
const char* PolicyName(SparesExhaustedPolicy policy);
bool ParsePolicy(const std::string& text, SparesExhaustedPolicy* policy);

struct Member {
  SlotId slot = -1;
  LogicalRank rank = kNoRank;
  Role role = Role::kSpare;
  std::string host;
  int32_t restarts = 0;
  int32_t corruptions = 0;  // corrupt copies found on the slot (docs/protect.md, "Silent data...")
  // The CUDA device the slot holds (-1: none) and the GPUs its node has (0: none known), as its
  // agent said in its hello; an activated spare takes the device of the rank it fills
  // (docs/launcher.md, "GPUs").
  int32_t device = -1;
  int32_t gpus = 0;
};

// The membership of one epoch: which slot holds each logical rank, and the spares left.
struct Membership {
  uint64_t epoch = 0;
  int32_t world_size = 0;            // logical ranks in this epoch
  std::vector<SlotId> rank_to_slot;  // index: logical rank
  std::vector<SlotId> spares;        // in the order they will be activated
  std::vector<SlotId> retired;
  std::vector<Role> slot_roles;  // index: slot; every slot's role in this epoch
  // Index: logical rank: the CUDA device of the slot that holds it (-1: none); empty when no
  // slot has a GPU (docs/launcher.md, "GPUs").
  std::vector<int32_t> devices;
};

// This slot's rank and role in `m` (kNoRank for spares and retired slots).
LogicalRank RankOfSlot(const Membership& m, SlotId slot);
Role RoleOfSlot(const Membership& m, SlotId slot);

struct AgentInfo {
  SlotId slot = -1;
  std::string host;
  int32_t pid = 0;
  // Where this slot's standby-capable coordinator listens (empty: none); the primary may appoint
  // it the standby.
  std::string coordinator_endpoint;
  // The slot's own CUDA device (its local index modulo its node's GPUs; -1: none) and the GPUs
  // of its node (0: none known).
  int32_t device = -1;
  int32_t gpus = 0;
};

struct Assignment {
  Role role = Role::kSpare;
  LogicalRank rank = kNoRank;
  uint64_t epoch = 0;
  int32_t world_size = 0;
  // The CUDA device of the rank (-1: none; a spare has none until it is activated).
  int32_t device = -1;
};

struct ControlEvent {
  enum class Type : uint8_t {
    kEpochChange = 0,  // membership changed; this slot's assignment may have changed too
    kShutdown = 1,     // the job is over (or must checkpoint and exit): stop the application
  };
  Type type = Type::kEpochChange;
  Membership membership;
  std::vector<LogicalRank> failed_ranks;
  std::string reason;
  Assignment assignment;          // this slot's assignment in the new epoch
  bool checkpoint_first = false;  // kShutdown under checkpoint-and-exit
  int32_t exit_code = 0;          // kShutdown: the job's exit code
};

// What an application is doing, for the coordinator's hang detector (docs/protect.md, "Hangs"):
// its runtime's sample (core/progress.h, once per heartbeat period, a kSample report), carried
// by every heartbeat of its agent with the sample's age.
struct CallProgress {
  uint64_t calls = 0;       // calls begun on its watched communicators
  bool in_call = false;     // one is under way
  int32_t peer = -1;        // the rank that call waits on (-1: none)
  bool long_phase = false;  // a phase longer than a step is under way
  int64_t age_ms = -1;      // since the agent heard the sample; -1: no sample from this process
};

// A rank's own work over the steps it ended since its agent's last heartbeat, for the
// coordinator's straggler detector (docs/protect.md, "Stragglers"): each step's time outside the
// watched communicators' calls, summed, and how many steps that is (0: none measured).
struct StepWork {
  uint64_t us = 0;
  uint32_t steps = 0;
};

// A planned swap (docs/protect.md, "Stragglers"): every rank of `epoch` stops at the start of
// `step`, once that step's snapshot is copied and replicated, and waits for the epoch that swaps
// the slow rank out; `cancel`: the swap is off, go on. The coordinator sends it to the agents,
// which forward it to their applications; a paused application says so, and its heartbeat
// carries it.
struct PauseNotice {
  uint64_t epoch = 0;
  uint64_t step = 0;
  bool cancel = false;
};

// Runtime → agent.
struct RuntimeReport {
  enum class Type : uint8_t {
    kProgress = 0,
    kDeviceError = 1,
    kDetach = 2,
    kKvPut = 3,
    kKvGet = 4,
    kGather = 5,        // key, value, timeout_ms and the gather's epoch, members, index, all
    kGatherResult = 6,  // key, value, epoch: the leader's result
    kSample = 7,        // progress: what the application is doing (sampled)
    kPaused = 8,        // epoch, step: paused there for a planned swap (PauseNotice)
    kCorrupt = 9,       // step: a copy of the replicated tensors was corrupt there
  };
  Type type = Type::kProgress;
  uint64_t step = 0;
  int64_t work_us = -1;    // kProgress: the step's own work (StepWork); -1: not measured
  std::string detail;      // device error text
  std::string key, value;  // KV requests
  int64_t timeout_ms = 0;  // kKvGet, kGather
  uint64_t epoch = 0;      // kGather, kGatherResult
  int32_t members = 0;     // kGather
  int32_t index = 0;       // kGather
  bool all = false;        // kGather
  CallProgress progress;   // kSample (its age is the agent's to fill)
};

// Wire limits (docs/control-protocol.md).
constexpr int32_t kMaxSlots = 65536;
// GPUs of one node (dp-launch --gpus-per-node): device ordinals are below it.
constexpr int32_t kMaxGpusPerNode = 1024;

}  // namespace rtft::control
