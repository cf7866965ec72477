// The application an agent supervises, as a whole process tree: a keeper (keeper.h) forked by the
// agent holds the application's tree in a PID namespace of its own where the system allows one
// (else in a process group under a subreaper), relays signals, and reports the application's
// wait status. A reaper thread blocked in waitpid() on the keeper knows the moment the tree has
// ended to well under a millisecond. No part of the tree outlives the slot: not when the agent is
// SIGKILLed (the keeper dies with it, and the kernel ends the namespace), not when the
// application's own child leaves its group or double-forks (docs/launcher.md).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread.h"
#include "launcher/executable.h"
#include "launcher/keeper.h"
#include "rtft/status.h"

namespace rtft::launch {

// RTFT_APP_ISOLATION: what the agent may fall back to.
enum class IsolationPolicy {
  kAuto,          // a PID namespace, else a user and PID namespace, else a process group (warned)
  kPidNamespace,  // a PID namespace (with or without a user namespace), or the start fails
  kProcessGroup,  // a process group under a subreaper, without trying namespaces
};
bool ParseIsolationPolicy(const std::string& text, IsolationPolicy* policy);

struct ChildSpec {
  std::vector<std::string> argv;
  // Set on top of the agent's environment (minus the MPI launcher's variables).
  std::vector<std::pair<std::string, std::string>> env;
  // Removed from the agent's environment (unless `env` sets them).
  std::vector<std::string> unset;
  // Set only where the agent's environment leaves them unset or empty.
  std::vector<std::pair<std::string, std::string>> env_defaults;
  IsolationPolicy isolation = IsolationPolicy::kAuto;
  // The agent stopped (SIGSTOP) this long: the keeper ends the tree and SIGKILLs the agent
  // (0: never). A stopped process cannot end itself, and its slot is replaced meanwhile.
  std::chrono::milliseconds stop_limit{0};
  // RLIMIT_NOFILE the application starts with (dp-launch raised its own); unset: inherited.
  std::optional<rlimit> app_nofile;
};

struct ChildExit {
  int wait_status = 0;  // the application's, as from waitpid
  std::chrono::steady_clock::time_point at;
  bool signaled() const;
  int signal() const;
  int code() const;  // exit code, or 128 + signal
  std::string ToString() const;
};

class ChildProcess {
 public:
  // `on_exit` runs on the reaper thread right after the exit is recorded, and after an early
  // `exiting()` (wake a waiter). Fails
  // when the application cannot be started (exec failed: the errno is in the status).
  static StatusOr<std::unique_ptr<ChildProcess>> Start(const ChildSpec& spec,
                                                       std::function<void()> on_exit = {});
  // Ends the tree (Kill) and reaps it.
  ~ChildProcess();

  // The keeper's pid: signals sent there reach the application's group (keeper.h).
  pid_t pid() const { return keeper_; }
  Isolation isolation() const { return isolation_; }
  // Why the application's /proc is the host's (the namespace's could not be mounted); empty
  // when it is its own or there is no namespace.
  const std::string& proc_note() const { return proc_note_; }
  // Set once the whole tree has ended; never blocks.
  std::optional<ChildExit> exited() const;
  // Set as soon as the application is known to be ending with a nonzero wait status, which can
  // be long before exited() (a process holding a GPU context is released by the kernel after its
  // descriptors are closed: up to half a second with pinned host memory, docs/launcher.md "How
  // an ending is seen"); stays set. Never for an application whose life pipe was closed, or
  // handed to a process that outlives it. The application may still hold its memory: start the
  // next one on this slot only after exited().
  std::optional<ChildExit> exiting() const;
  // Relays `sig` to the application's process group (SIGTERM, SIGINT, SIGHUP, SIGUSR1, ...).
  void Signal(int sig) const;
  // Ends the whole tree at once (SIGKILL to every process of it).
  void Kill() const;
  // The pid, as this process sees it, of a process of the tree that knows itself as `inner`
  // (getpid() inside the namespace: what the runtime attaches with); nullopt when none is.
  std::optional<pid_t> OuterPid(pid_t inner) const;

 private:
  ChildProcess() = default;
  void Reap();
  void Exited(int wait_status);   // records the ending and runs on_exit_
  void Exiting(int wait_status);  // records the early notice and runs on_exit_

  pid_t keeper_ = -1;
  Isolation isolation_ = Isolation::kProcessGroup;
  std::string proc_note_;
  int status_fd_ = -1;  // read end: the application's wait status from the keeper
  std::atomic<bool> done_{false};
  ChildExit exit_;
  std::atomic<bool> ending_{false};
  ChildExit ending_exit_;
  std::function<void()> on_exit_;
  Thread reaper_;
};

}  // namespace rtft::launch
