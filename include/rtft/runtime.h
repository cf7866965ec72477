// rtft::Runtime: what an application linked with librt-ft sees of the job it runs in under
// dp-launch. Create() connects to the slot's agent and returns the process's role, logical rank
// and epoch; a warm spare blocks in Create() until the coordinator gives it a failed slot's rank.
// Failure events (another rank failed: abort communicators, roll back) reach the application
// within milliseconds, through callbacks and a pollable queue; every communicator made with
// CreateCommunicator() is aborted at an event before any callback runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rtft/comm.h"
#include "rtft/export.h"
#include "rtft/status.h"

namespace rtft {

// How the process started: rtft/enum_list.h.
enum class RuntimeRole : uint8_t {
#define RTFT_RUNTIME_ROLE(id, name, value, meaning) id = value,
#include "rtft/enum_list.h"
#undef RTFT_RUNTIME_ROLE
};
RTFT_EXPORT const char* RuntimeRoleName(RuntimeRole role);

struct RuntimeInfo {
  RuntimeRole role = RuntimeRole::kStandalone;
  int rank = 0;
  int world_size = 1;
  uint64_t epoch = 0;
  int slot = 0;
  // The CUDA device this process uses: under dp-launch the device of its rank (its slot's GPU; a
  // warm spare's is the one it is given at activation, docs/launcher.md "GPUs"); else
  // RTFT_DEVICE; 0 when neither says. Select it with cudaSetDevice only after Create() returned:
  // a spare touches no GPU before it is activated.
  int device = 0;
};

struct FailureEvent {
  uint64_t epoch = 0;             // the new epoch
  int rank = -1;                  // this process's logical rank in the new epoch (shrink renumbers)
  std::vector<int> failed_ranks;  // logical ranks that failed
  std::string reason;
  int world_size = 0;     // logical ranks in the new epoch (smaller after a shrink)
  bool shutdown = false;  // the job is ending: finish (checkpoint first if asked) and exit
  bool checkpoint_first = false;
};

struct RuntimeOptions {
  // How long a warm spare may wait for activation (default: forever).
  std::chrono::milliseconds standby_timeout = std::chrono::milliseconds::max();
  std::chrono::milliseconds connect_timeout{10000};
};

// Waits for rt-ft's own threads that outlive their objects (an NCCL communicator's abort, which
// waits up to a second for a dead peer) to end. Runtime's destructor calls it; a program that
// uses rt-ft without a Runtime (communicators or the checkpoint engine alone) calls it before
// returning from main(), so that no such thread is inside NCCL or CUDA when their exit handlers
// run. Safe to call more than once.
RTFT_EXPORT void Shutdown();

class RTFT_EXPORT Runtime {
 public:
  // Under dp-launch (RTFT_AGENT_SOCKET set): attaches to the agent and returns once this process
  // has a logical rank. Otherwise: a standalone runtime, rank 0 of 1.
  static StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options = {});
  // Calls rtft::Shutdown() last.
  virtual ~Runtime();

  // The process's place when Create() returned.
  virtual const RuntimeInfo& info() const = 0;
  // Its place now: the epoch, rank and world size of the latest event (a shrink renumbers).
  virtual RuntimeInfo current() const = 0;

  // Listeners run on the runtime's thread for every event, as it arrives, in the order they
  // subscribed. Keep them short: set a flag, wake a thread. After Unsubscribe(token) returns,
  // that listener is not running and is never called again.
  using Listener = std::function<void(const FailureEvent&)>;
  virtual uint64_t Subscribe(Listener listener) = 0;
  virtual void Unsubscribe(uint64_t token) = 0;
  // One listener of its own, replaced by the next call (nullptr removes it).
  virtual void OnFailure(Listener callback) = 0;
  // The next event not yet polled, if any.
  virtual std::optional<FailureEvent> PollEvent() = 0;
  // Step progress for the agent's hang watchdog; call once per step.
  virtual Status ReportStep(uint64_t step) = 0;
  // A sticky device error: the slot cannot go on; the coordinator swaps in a spare.
  virtual Status ReportDeviceError(const std::string& detail) = 0;
  // The key-value store of the job (rendezvous of communicators), through the agent.
  virtual Status KvPut(const std::string& key, const std::string& value) = 0;
  virtual StatusOr<std::string> KvGet(const std::string& key,
                                      std::chrono::milliseconds timeout) = 0;

  // The job's store and failure events as the comm layer wants them: CommOptions::store and
  // CommOptions::aborts. Both live as long as the runtime.
  virtual CommStore* comm_store() = 0;
  virtual AbortRegistry* abort_registry() = 0;
  // A communicator of the current epoch over every rank of it, aborted at the next failure
  // event. `options` gives the backend, timeouts, device and host; its rank, world size, epoch,
  // name, store and registry are filled in.
  StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const std::string& name,
                                                             CommOptions options = {});
  // A communicator of the current epoch over a group of its ranks: this process is `group_rank`
  // of `group_size`, and every member gives the same `name` (unique per group, e.g. with the
  // group's coordinates in it). Aborted at the next failure event like the others.
  StatusOr<std::unique_ptr<Communicator>> CreateGroupCommunicator(const std::string& name,
                                                                  int group_rank, int group_size,
                                                                  CommOptions options = {});
};

}  // namespace rtft
