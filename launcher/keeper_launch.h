// The agent's side of starting a keeper (keeper.h): the application's image, built before the
// fork because the keeper may not allocate; the pipes between agent and keeper; the user
// namespace's id maps; and what every keeper of the process shares: the agent's /proc stat
// descriptor, the stopped-agent switch and the descriptors held in reserve. child_process.cc
// tries the isolations in turn through StartKeeper.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "launcher/keeper.h"
#include "rtft/status.h"

namespace rtft::launch {

// argv, the /bin/sh fallback's argv and the environment as execve wants them. The pointers point
// into the object itself: it is neither copied nor moved.
class AppImage {
 public:
  AppImage(std::string path, const std::vector<std::string>& argv, std::vector<std::string> env);
  AppImage(const AppImage&) = delete;
  AppImage& operator=(const AppImage&) = delete;

  const std::string& path() const { return path_; }
  const std::string& name() const { return args_[0]; }
  char* const* argv() const { return argv_.data(); }
  char* const* sh_argv() const { return sh_argv_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::string path_;
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, sh_argv_, envp_;
};

struct KeeperOptions {
  int stop_limit_ms = 0;             // KeeperPlan::stop_limit_ms
  std::optional<rlimit> app_nofile;  // KeeperPlan::app_nofile
};

struct StartedKeeper {
  pid_t pid = -1;
  int status_fd = -1;     // read end: the application's wait status (the caller closes it)
  std::string proc_note;  // why the application sees the host's /proc; empty when it does not
};

// Starts a keeper that holds `isolation` and starts the application; returns once the
// application exec'd. kUnavailable: the system refused this isolation (try the next one); any
// other error: the application cannot be started.
StatusOr<StartedKeeper> StartKeeper(Isolation isolation, const AppImage& image,
                                    const KeeperOptions& options);

// The signal that asks a keeper to end its whole tree (keeper.h: nothing else sends it).
int KillTreeSignal();

// Takes the descriptor reserve once, so that every later start has it (StartKeeper uses it when
// the process runs out of descriptors).
void FillDescriptorReserve();

}  // namespace rtft::launch
