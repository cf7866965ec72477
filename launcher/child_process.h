// The application process an agent supervises: fork/exec with an environment, a reaper thread
// blocked in waitpid() so that the moment of death is known to well under a millisecond, and
// signals. The child dies with its agent (PR_SET_PDEATHSIG), so a lost slot takes its
// application along instead of leaving a rank running unsupervised.
#pragma once

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

#include "rtft/status.h"

namespace rtft::launch {

struct ChildSpec {
  std::vector<std::string> argv;
  // Set on top of the agent's environment (minus the MPI launcher's variables).
  std::vector<std::pair<std::string, std::string>> env;
};

struct ChildExit {
  int wait_status = 0;  // as from waitpid
  std::chrono::steady_clock::time_point at;
  bool signaled() const;
  int signal() const;
  int code() const;  // exit code, or 128 + signal
  std::string ToString() const;
};

class ChildProcess {
 public:
  // `on_exit` runs on the reaper thread right after the exit is recorded (wake a waiter).
  static StatusOr<std::unique_ptr<ChildProcess>> Start(const ChildSpec& spec,
                                                       std::function<void()> on_exit = {});
  // Kills (SIGKILL) and reaps a child that is still running.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Set once the child has ended; never blocks.
  std::optional<ChildExit> exited() const;
  void Signal(int sig) const;

 private:
  ChildProcess() = default;
  void Reap();

  pid_t pid_ = -1;
  std::atomic<bool> done_{false};
  ChildExit exit_;
  std::function<void()> on_exit_;
  std::thread reaper_;
};

}  // namespace rtft::launch
