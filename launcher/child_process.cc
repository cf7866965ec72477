#include "launcher/child_process.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/logging.h"
#include "core/thread.h"
#include "launcher/keeper_launch.h"

extern char** environ;

namespace rtft::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long an ending tree may take before the keeper itself is SIGKILLed.
constexpr std::chrono::seconds kKillDeadline{2};

// Variables of the MPI launcher that would make an MPI application in the child believe it is
// the agent's MPI process.
bool IsLauncherVariable(const char* entry) {
  static const char* kPrefixes[] = {"OMPI_", "PMIX_", "PMI_", "ORTE_", "OPAL_", "HYDRA_", "MPIR_"};
  for (const char* p : kPrefixes)
    if (std::strncmp(entry, p, std::strlen(p)) == 0) return true;
  return false;
}

bool Names(const char* entry, const std::string& name) {
  return std::strncmp(entry, name.c_str(), name.size()) == 0 && entry[name.size()] == '=';
}

std::vector<std::string> BuildEnvironment(const ChildSpec& spec) {
  std::vector<std::string> env;
  std::vector<bool> given(spec.env_defaults.size(), false);
  for (char** e = environ; *e; ++e) {
    if (IsLauncherVariable(*e)) continue;
    bool replaced = false;
    for (const auto& [name, value] : spec.env) replaced = replaced || Names(*e, name);
    for (const auto& name : spec.unset) replaced = replaced || Names(*e, name);
    for (size_t i = 0; i < given.size(); ++i) {
      const std::string& name = spec.env_defaults[i].first;
      if (Names(*e, name) && (*e)[name.size() + 1] != '\0') given[i] = true;
    }
    if (!replaced) env.emplace_back(*e);
  }
  for (const auto& [name, value] : spec.env) env.push_back(name + "=" + value);
  for (size_t i = 0; i < given.size(); ++i)
    if (!given[i]) env.push_back(spec.env_defaults[i].first + "=" + spec.env_defaults[i].second);
  return env;
}

// What the system allowed the first time; later starts use it directly.
std::mutex g_isolation_mu;
std::optional<Isolation> g_isolation;

std::vector<Isolation> Candidates(IsolationPolicy policy) {
  {
    std::lock_guard<std::mutex> lock(g_isolation_mu);
    if (g_isolation) return {*g_isolation};
  }
  switch (policy) {
    case IsolationPolicy::kAuto:
      return {Isolation::kPidNamespace, Isolation::kUserPidNamespace, Isolation::kProcessGroup};
    case IsolationPolicy::kPidNamespace:
      return {Isolation::kPidNamespace, Isolation::kUserPidNamespace};
    case IsolationPolicy::kProcessGroup:
      return {Isolation::kProcessGroup};
  }
  return {};
}

// Inode of a process's PID namespace; 0 when unknown.
ino_t PidNamespaceOf(pid_t pid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

// The NSpid line of /proc/<pid>/status: its pid in each namespace, outermost first.
std::vector<long> NsPids(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream words(line.substr(6));
    std::vector<long> pids;
    long v;
    while (words >> v) pids.push_back(v);
    return pids;
  }
  return {};
}

}  // namespace

bool ParseIsolationPolicy(const std::string& text, IsolationPolicy* policy) {
  if (text == "auto")
    *policy = IsolationPolicy::kAuto;
  else if (text == "pid-namespace")
    *policy = IsolationPolicy::kPidNamespace;
  else if (text == "process-group")
    *policy = IsolationPolicy::kProcessGroup;
  else
    return false;
  return true;
}

bool ChildExit::signaled() const { return WIFSIGNALED(wait_status); }
int ChildExit::signal() const { return signaled() ? WTERMSIG(wait_status) : 0; }
int ChildExit::code() const {
  return signaled() ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}
std::string ChildExit::ToString() const {
  if (signaled())
    return std::string("killed by signal ") + std::to_string(signal()) + " (" +
           strsignal(signal()) + ")";
  return "exited with code " + std::to_string(code());
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(const ChildSpec& spec,
                                                            std::function<void()> on_exit) {
  if (spec.argv.empty()) return Status::InvalidArgument("no application to start");
  RTFT_ASSIGN_OR_RETURN(std::string path, ResolveExecutable(spec.argv[0]));
  const AppImage image(std::move(path), spec.argv, BuildEnvironment(spec));
  KeeperOptions options;
  options.stop_limit_ms = static_cast<int>(spec.stop_limit.count());
  options.app_nofile = spec.app_nofile;
  FillDescriptorReserve();
  Status refused = Status::Unavailable("no way to start the application");
  bool tried_namespace = false;
  for (Isolation isolation : Candidates(spec.isolation)) {
    if (isolation == Isolation::kProcessGroup && tried_namespace)
      RTFT_LOG(kWarn, kLogLaunch)
          << "cannot hold the application in a PID namespace (" << refused
          << "): it runs in a process group under a subreaper instead, where a process of its "
             "tree survives when the keeper itself is SIGKILLed. Allow unprivileged user "
             "namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces) "
             "or set RTFT_APP_ISOLATION=process-group to choose this knowingly";
    tried_namespace = isolation != Isolation::kProcessGroup;
    auto started = StartKeeper(isolation, image, options);
    if (!started.ok() && started.status().code() == StatusCode::kUnavailable) {
      refused = started.status();
      RTFT_LOG(kDebug, kLogLaunch) << refused;
      continue;
    }
    RTFT_RETURN_IF_ERROR(started.status());
    {
      std::lock_guard<std::mutex> lock(g_isolation_mu);
      g_isolation = isolation;
    }
    std::unique_ptr<ChildProcess> child(new ChildProcess());
    child->keeper_ = started->pid;
    child->isolation_ = isolation;
    child->proc_note_ = std::move(started->proc_note);
    child->status_fd_ = started->status_fd;
    child->on_exit_ = std::move(on_exit);
    auto reaper = Thread::Start("rtft-reaper", [c = child.get()] { c->Reap(); });
    if (!reaper.ok()) {
      child->Kill();
      return reaper.status();
    }
    child->reaper_ = std::move(*reaper);
    return child;
  }
  return refused;
}

// The keeper reports the application's ending early where it can (KeeperStatus::kExiting), and
// its wait status once the whole tree is gone, and only then exits. Its exit can take tens of
// milliseconds more (a PID and mount namespace are torn down), so the status is reported as soon
// as it is read, and the keeper is reaped after.
void ChildProcess::Reap() {
  KeeperStatus record;
  size_t have = 0;
  bool known = false;
  int app_status = 0;
  while (true) {
    const ssize_t n =
        ::read(status_fd_, reinterpret_cast<char*>(&record) + have, sizeof(record) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    if (have < sizeof(record)) continue;
    have = 0;
    if (record.kind == KeeperStatus::kExiting) {
      Exiting(record.status);
    } else if (record.kind == KeeperStatus::kEnded) {
      app_status = record.status;
      known = true;
      break;
    }
  }
  if (known) Exited(app_status);
  int keeper_status = 0;
  pid_t r;
  do {
    r = ::waitpid(keeper_, &keeper_status, __WALL);
  } while (r < 0 && errno == EINTR);
  if (known) return;
  if (r == keeper_ && WIFSIGNALED(keeper_status)) {
    Exited(keeper_status);  // the keeper was killed, and the tree with it
  } else {
    Exited(SIGKILL);  // unknown: report a kill
  }
}

void ChildProcess::Exited(int wait_status) {
  exit_.wait_status = wait_status;
  exit_.at = Clock::now();
  done_.store(true, std::memory_order_release);
  if (on_exit_) (void)RunGuarded("the application's reaper", on_exit_);
}

void ChildProcess::Exiting(int wait_status) {
  if (ending_.load(std::memory_order_relaxed)) return;
  ending_exit_.wait_status = wait_status;
  ending_exit_.at = Clock::now();
  ending_.store(true, std::memory_order_release);
  if (on_exit_) (void)RunGuarded("the application's reaper", on_exit_);
}

std::optional<ChildExit> ChildProcess::exiting() const {
  if (!ending_.load(std::memory_order_acquire)) return std::nullopt;
  return ending_exit_;
}

std::optional<ChildExit> ChildProcess::exited() const {
  if (!done_.load(std::memory_order_acquire)) return std::nullopt;
  return exit_;
}

void ChildProcess::Signal(int sig) const {
  if (!done_.load(std::memory_order_acquire)) ::kill(keeper_, sig);
}

void ChildProcess::Kill() const { Signal(KillTreeSignal()); }

std::optional<pid_t> ChildProcess::OuterPid(pid_t inner) const {
  if (isolation_ == Isolation::kProcessGroup) return inner;
  const ino_t ns = PidNamespaceOf(keeper_);
  if (ns == 0) return std::nullopt;
  DIR* dir = ::opendir("/proc");
  if (!dir) return std::nullopt;
  std::optional<pid_t> found;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || PidNamespaceOf(static_cast<pid_t>(pid)) != ns) continue;
    const std::vector<long> ids = NsPids(static_cast<pid_t>(pid));
    if (!ids.empty() && ids.back() == inner) {
      found = static_cast<pid_t>(pid);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

ChildProcess::~ChildProcess() {
  if (!done_.load(std::memory_order_acquire)) {
    if (isolation_ == Isolation::kProcessGroup) {
      // Outside a namespace only the keeper can find the whole tree: let it.
      Kill();
      const auto deadline = Clock::now() + kKillDeadline;
      while (!done_.load(std::memory_order_acquire) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!done_.load(std::memory_order_acquire)) ::kill(keeper_, SIGKILL);
  }
  reaper_.Join();
  if (status_fd_ >= 0) ::close(status_fd_);
}

}  // namespace rtft::launch
