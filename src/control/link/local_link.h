// The link between an agent (dp-launch) and the application process it supervises: a ZeroMQ
// ipc:// socket in a private (0700) directory. The agent tells the runtime its assignment (a
// warm spare waits here until it gets one) and forwards events; the runtime reports step
// progress (for the watchdog) and device errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "control/wire/gather.h"
#include "control/wire/types.h"
#include "rtft/status.h"

namespace rtft::control {

// A fresh private directory for the link's socket: mkdtemp under $TMPDIR (or /tmp), mode 0700,
// named rtft-agent-<pid>-XXXXXX; directories left there by agents whose pid is gone are removed.
StatusOr<std::string> MakeLocalLinkDir();

// Agent side: one per supervised application process (it survives the application's restarts:
// the newest process to attach is the one served). Thread-safe; an internal thread owns the
// socket. Should that thread fail (core/thread.h), every call returns its error (kInternal).
class LocalServer {
 public:
  // Binds ipc://<path>. The directory holding `path` must exist, belong to this user and be
  // closed to group and others (0700), so no other user can connect.
  static StatusOr<std::unique_ptr<LocalServer>> Bind(const std::string& path);
  virtual ~LocalServer() = default;
  virtual const std::string& path() const = 0;
  // Waits for the runtime's attach (carrying its pid).
  virtual StatusOr<int32_t> WaitAttach(std::chrono::milliseconds timeout) = 0;
  // To the most recently attached process; FailedPrecondition before any attach.
  virtual Status SendAssignment(const Assignment& assignment) = 0;
  virtual Status SendEvent(const ControlEvent& event) = 0;
  virtual StatusOr<std::optional<RuntimeReport>> PollReport(std::chrono::milliseconds timeout) = 0;
  // Answers a kKvGet (the agent forwards KV requests to the coordinator).
  virtual Status SendKvReply(const std::string& key, const StatusOr<std::string>& value) = 0;
  // Answers a kGather report (the agent forwards gathers to the coordinator).
  virtual Status SendGatherReply(const std::string& key, const StatusOr<GatherReply>& reply) = 0;
  // A planned swap's notice (docs/protect.md, "Stragglers"), forwarded from the coordinator.
  virtual Status SendPause(const PauseNotice& notice) = 0;
};

// Runtime side. Thread-safe; an internal thread owns the socket.
class LocalClient {
 public:
  static StatusOr<std::unique_ptr<LocalClient>> Connect(const std::string& path);
  virtual ~LocalClient() = default;
  virtual Status Attach(int32_t pid) = 0;
  // Blocks until the agent sends an assignment (a warm spare waits here).
  virtual StatusOr<Assignment> WaitAssignment(std::chrono::milliseconds timeout) = 0;
  // Returns early (nullopt) when a pause notice came: TakePause() then has it.
  virtual StatusOr<std::optional<ControlEvent>> PollEvent(std::chrono::milliseconds timeout) = 0;
  // The newest planned swap's notice from the agent, once (nullopt: none since the last call).
  virtual std::optional<PauseNotice> TakePause() = 0;
  virtual Status Report(const RuntimeReport& report) = 0;
  // Queued to the agent, which forwards it to the coordinator (no answer comes back).
  virtual Status KvPut(const std::string& key, const std::string& value) = 0;
  // The agent answers with SendKvReply; waits `timeout` plus two seconds for the round trip.
  virtual StatusOr<std::string> KvGet(const std::string& key,
                                      std::chrono::milliseconds timeout) = 0;
  // This member's contribution to gather `g.key` (control/wire/gather.h); the agent answers
  // with SendGatherReply. Waits the gather's timeout plus two seconds for the round trip.
  virtual StatusOr<GatherReply> Gather(const GatherRequest& g) = 0;
  // The leader's result; queued to the agent like KvPut (no answer comes back).
  virtual Status GatherResult(const std::string& key, uint64_t epoch, const std::string& value) = 0;
};

}  // namespace rtft::control
