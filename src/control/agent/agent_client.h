// An agent's (dp-launch's) connection to the coordinator: join and receive an assignment,
// heartbeats on a background thread (carrying the application's step progress), failure and
// exit reports, events (epoch changes, activation of a spare, shutdown) and the KV store. When
// the primary names a standby, the agent connects to it too, votes for it once it lost the
// primary, and follows it when it takes over (requests in flight are sent again).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/wire/codec.h"
#include "control/wire/gather.h"
#include "control/wire/keys.h"
#include "control/wire/types.h"
#include "rtft/status.h"

namespace rtft::control {

// Defaults of AgentClientOptions from RTFT_CTRL_REQUEST_TIMEOUT_MS and
// RTFT_CTRL_COORDINATOR_TIMEOUT_MS (malformed values fall back to 5 s, with a warning).
std::chrono::milliseconds DefaultRequestTimeout();
std::chrono::milliseconds DefaultCoordinatorTimeout();

struct AgentClientOptions {
  std::string endpoint;  // the coordinator's
  JobKeys keys;
  AgentInfo me;
  std::chrono::milliseconds heartbeat_period{100};
  std::chrono::milliseconds request_timeout = DefaultRequestTimeout();
  // Silence of the primary this long makes the agent vote for the standby (when the primary
  // named one): it lost the primary. 0: the coordinator timeout.
  std::chrono::milliseconds primary_timeout{0};
  // Silence of every coordinator this long (no primary, and no standby took over) means the
  // job's coordinators are gone: WaitEvent then fails with kUnavailable and the agent should
  // stop its application.
  std::chrono::milliseconds coordinator_timeout = DefaultCoordinatorTimeout();
  // Fault seam for tests: called at the top of every round of the client's thread; what it
  // throws must end the thread with a recorded error, never the process.
  std::function<void()> fault_point;
  // Called on the client's thread, without its lock, when the answer to a StartGather or a
  // StartKvGet arrives or the client loses the coordinators: whoever polls those handles wakes
  // then instead of at its next tick. Keep it short (set a flag, notify).
  std::function<void()> on_answer;
};

class AgentClient {
 public:
  static StatusOr<std::unique_ptr<AgentClient>> Connect(const AgentClientOptions& options);
  virtual ~AgentClient() = default;

  // Says hello and waits until every slot has joined; returns this slot's first assignment.
  // The other calls fail with kFailedPrecondition until Join was called. Join may be called
  // again after a timeout; it then keeps waiting for the same assignment.
  virtual StatusOr<Assignment> Join(std::chrono::milliseconds timeout) = 0;
  // The application failed on this slot; the coordinator answers with an epoch change event.
  virtual Status ReportFailure(FailureKind kind, LogicalRank rank, int32_t detail) = 0;
  // Latest step the application reported; sent with the next heartbeat.
  virtual void SetProgress(uint64_t step) = 0;
  // One step's own work (the runtime's measure, microseconds): summed with the others since the
  // last heartbeat, which carries the sum and the count (the coordinator's straggler detector).
  virtual void AddStepWork(uint64_t us) = 0;
  // A planned swap's notice from the coordinator (pause at a step, or go on), once: the agent
  // forwards it to its application. nullopt when none came since the last call.
  virtual std::optional<PauseNotice> TakePause() = 0;
  // Where the application stands paused (sent with every heartbeat from now on); nullopt: it
  // does not (the agent clears it at every event and at a cancel).
  virtual void SetPaused(std::optional<PauseNotice> paused) = 0;
  // The application's latest progress sample (its age_ms is ignored: the client measures it from
  // this call), sent with every heartbeat from now on; nullopt: the application running now has
  // sent none (it was just started).
  virtual void SetCallProgress(std::optional<CallProgress> progress) = 0;
  // The application exited for good with `code` (0: finished its work).
  virtual Status ReportExit(int32_t code) = 0;
  // The next event for this slot, or nullopt after `timeout`. kUnavailable once the coordinator
  // is lost; kInternal when the client's own thread failed (then every call fails with it).
  virtual StatusOr<std::optional<ControlEvent>> WaitEvent(std::chrono::milliseconds timeout) = 0;
  // From now on no request waits past `deadline` (an agent shutting down within its grace: the
  // coordinator may already be gone).
  virtual void SetDeadline(std::chrono::steady_clock::time_point deadline) = 0;
  virtual Status KvPut(const std::string& key, const std::string& value) = 0;
  // The slot of the primary this agent follows, and its generation (0 before the first answer).
  virtual SlotId primary_slot() const = 0;
  virtual Generation generation() const = 0;
  // When the client's thread last handed a heartbeat to its socket (steady clock; epoch before
  // the first), and the longest time between two of them so far (a thread starved on a loaded
  // machine: a primary may then rightly take the slot for lost).
  virtual std::chrono::steady_clock::time_point last_heartbeat_sent() const = 0;
  virtual std::chrono::steady_clock::duration longest_heartbeat_gap() const = 0;
  // Blocks until the key exists (or `timeout`: DeadlineExceeded).
  virtual StatusOr<std::string> KvGet(const std::string& key,
                                      std::chrono::milliseconds timeout) = 0;
  // The same without blocking: one request, answered by the coordinator once the key exists or at
  // `timeout` (kDeadlineExceeded); a handle for PollKvGet.
  virtual StatusOr<uint64_t> StartKvGet(const std::string& key,
                                        std::chrono::milliseconds timeout) = 0;
  // nullopt while the answer is not in; then the answer, once (the handle is forgotten). The
  // client gives up `request_timeout` after the get's own timeout (kDeadlineExceeded).
  virtual std::optional<StatusOr<std::string>> PollKvGet(uint64_t handle) = 0;
  // A gather (control/wire/gather.h), without blocking: sends this member's contribution and
  // returns a handle for PollGather. The coordinator answers when every member contributed (a
  // member but the leader: when the leader sent its result), with kAborted once the epoch ended,
  // or with kDeadlineExceeded after `timeout_ms`.
  virtual StatusOr<uint64_t> StartGather(const GatherRequest& g) = 0;
  // nullopt while the answer is not in; then the answer, once (the handle is forgotten). The
  // client gives up `request_timeout` after the gather's own timeout (kDeadlineExceeded).
  virtual std::optional<StatusOr<GatherReply>> PollGather(uint64_t handle) = 0;
  // Drops a gather or a get whose answer nobody waits for any more.
  virtual void Forget(uint64_t handle) = 0;
  // StartGather, then waits for its answer.
  virtual StatusOr<GatherReply> Gather(const GatherRequest& g) = 0;
  // The leader's result of gather `key` of `epoch`, for the other members; waits for the ack.
  virtual Status GatherResult(const std::string& key, uint64_t epoch, const std::string& value) = 0;
};

}  // namespace rtft::control
