#include "launcher/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "control/guarded.h"
#include "core/logging.h"

extern char** environ;

namespace rtft::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the agent waits for the application's exec (the keeper's report pipe to close).
constexpr std::chrono::seconds kExecDeadline{60};
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

std::vector<std::string> BuildEnvironment(const ChildSpec& spec) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (IsLauncherVariable(*e)) continue;
    bool replaced = false;
    for (const auto& [name, value] : spec.env)
      if (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=')
        replaced = true;
    if (!replaced) env.emplace_back(*e);
  }
  for (const auto& [name, value] : spec.env) env.push_back(name + "=" + value);
  return env;
}

// The agent's request to end a tree (keeper.h): a real-time signal nothing else sends.
int KillTreeSignal() { return SIGRTMIN + 4; }

// /proc/<agent>/stat, open for the life of the process: every keeper watches the agent's state
// through it (it still names the agent after the keeper mounts its namespace's /proc).
int AgentStatFd() {
  static const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  return fd;
}

// The write end of a pipe whose read end, kept by the agent, delivers SIGKILL to the agent when a
// byte arrives (F_SETOWN + F_SETSIG): a keeper in a PID namespace cannot name its agent in
// kill(), yet must end it when it stays stopped. -1 when the system refuses it (then a stopped
// agent is ended only by the other agents of its host).
int KillSwitchFd() {
  static const int fd = [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    if (::fcntl(fds[0], F_SETOWN, ::getpid()) != 0 || ::fcntl(fds[0], F_SETSIG, SIGKILL) != 0 ||
        ::fcntl(fds[0], F_SETFL, O_ASYNC | O_NONBLOCK) != 0) {
      RTFT_LOG(kWarn, kLogLaunch) << "cannot arm the stopped-agent switch: "
                                  << std::strerror(errno);
      ::close(fds[0]);
      ::close(fds[1]);
      return -1;
    }
    return fds[1];  // the read end stays open, unused, for the life of the process
  }();
  return fd;
}

// Descriptors held in reserve (on /dev/null) so that the application can be started again even
// when something else took every other descriptor of the process (docs/launcher.md): a start
// that meets EMFILE gives them back and tries again; the next start takes them again.
class DescriptorReserve {
 public:
  static constexpr int kCount = 16;
  void Fill() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int& fd : fds_)
      if (fd < 0) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  // True when there was something to give back.
  bool Release() {
    std::lock_guard<std::mutex> lock(mu_);
    bool any = false;
    for (int& fd : fds_) {
      if (fd < 0) continue;
      ::close(fd);
      fd = -1;
      any = true;
    }
    return any;
  }

 private:
  std::mutex mu_;
  int fds_[kCount] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
};

DescriptorReserve g_reserve;

// Pipes closed by the destructor unless released.
struct Pipe {
  int r = -1, w = -1;
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  Status Open() {
    int fds[2];
    int rc = ::pipe2(fds, O_CLOEXEC);
    if (rc != 0 && (errno == EMFILE || errno == ENFILE) && g_reserve.Release()) {
      RTFT_LOG(kWarn, kLogLaunch) << "out of descriptors: using the reserve to start the "
                                     "application";
      rc = ::pipe2(fds, O_CLOEXEC);
    }
    if (rc != 0) return Status::FromErrno(errno, "pipe2");
    r = fds[0];
    w = fds[1];
    return Status::Ok();
  }
  void CloseWrite() {
    if (w >= 0) ::close(w);
    w = -1;
  }
};

bool WriteFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A user namespace's only mapping: this process's own user and group, so the application keeps
// its ids (and, unless they are 0, has no privilege at all).
bool WriteIdMaps(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  return WriteFile(proc + "/setgroups", "deny") &&
         WriteFile(proc + "/uid_map", uid + " " + uid + " 1\n") &&
         WriteFile(proc + "/gid_map", gid + " " + gid + " 1\n");
}

long CloneFlags(Isolation isolation) {
  switch (isolation) {
    case Isolation::kPidNamespace:
      return CLONE_NEWPID | CLONE_NEWNS;
    case Isolation::kUserPidNamespace:
      return CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS;
    case Isolation::kProcessGroup:
      return 0;
  }
  return 0;
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

// Reads the keeper's notes until the pipe closes (the application exec'd, or the keeper ended).
Status ReadNotes(int fd, std::vector<KeeperNote>* notes) {
  const auto deadline = Clock::now() + kExecDeadline;
  KeeperNote note;
  size_t have = 0;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status::DeadlineExceeded("the application did not start within 60 s");
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(&note) + have, sizeof(note) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Ok();
    have += static_cast<size_t>(n);
    if (have == sizeof(note)) {
      notes->push_back(note);
      have = 0;
    }
  }
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

int FindExecutable(const std::string& app, std::string* path) {
  if (app.empty()) return ENOENT;
  auto check = [](const std::string& candidate) -> int {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0) return errno;
    if (!S_ISREG(st.st_mode)) return EACCES;  // as execve: a directory, a device...
    return ::access(candidate.c_str(), X_OK) != 0 ? errno : 0;
  };
  if (app.find('/') != std::string::npos) {
    const int err = check(app);
    if (err == 0) *path = app;
    return err;
  }
  const char* path_env = std::getenv("PATH");
  const std::string dirs = path_env && *path_env ? path_env : "/bin:/usr/bin";
  int first = ENOENT;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = (end > begin ? dirs.substr(begin, end - begin) : ".") + "/" + app;
    const int err = check(candidate);
    if (err == 0) {
      *path = candidate;
      return 0;
    }
    // As execvp: a file that exists but may not be run is reported over one that is absent.
    if (err != ENOENT && err != ENOTDIR && first == ENOENT) first = err;
    begin = end + 1;
  }
  return first;
}

StatusOr<std::string> ResolveExecutable(const std::string& app) {
  std::string path;
  const int err = FindExecutable(app, &path);
  if (err == 0) return path;
  return Status::FromErrno(err, "the application '" + app + "' cannot be executed" +
                                    (app.find('/') == std::string::npos ? " (searched PATH)" : ""));
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(const ChildSpec& spec,
                                                            std::function<void()> on_exit) {
  if (spec.argv.empty()) return Status::InvalidArgument("no application to start");
  RTFT_ASSIGN_OR_RETURN(const std::string path, ResolveExecutable(spec.argv[0]));
  // Everything the keeper needs is built before the fork: it allocates nothing.
  const std::vector<std::string> env = BuildEnvironment(spec);
  std::vector<char*> argv, sh_argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  sh_argv.push_back(const_cast<char*>("/bin/sh"));
  sh_argv.push_back(const_cast<char*>(path.c_str()));
  for (size_t i = 1; i < spec.argv.size(); ++i)
    sh_argv.push_back(const_cast<char*>(spec.argv[i].c_str()));
  sh_argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  if (AgentStatFd() < 0) return Status::FromErrno(errno, "/proc/self/stat");
  g_reserve.Fill();  // the first start takes it, so that every later one has it

  Status last = Status::Unavailable("no way to start the application");
  bool tried_namespace = false;
  for (Isolation isolation : Candidates(spec.isolation)) {
    if (isolation == Isolation::kProcessGroup && tried_namespace)
      RTFT_LOG(kWarn, kLogLaunch)
          << "cannot hold the application in a PID namespace (" << last
          << "): it runs in a process group under a subreaper instead, where a process of its "
             "tree survives when the keeper itself is SIGKILLed. Allow unprivileged user "
             "namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces) "
             "or set RTFT_APP_ISOLATION=process-group to choose this knowingly";
    tried_namespace = isolation != Isolation::kProcessGroup;
    Pipe report, status, go;
    RTFT_RETURN_IF_ERROR(report.Open());
    RTFT_RETURN_IF_ERROR(status.Open());
    const bool user_ns = isolation == Isolation::kUserPidNamespace;
    if (user_ns) RTFT_RETURN_IF_ERROR(go.Open());
    KeeperPlan plan;
    plan.isolation = isolation;
    plan.path = path.c_str();
    plan.argv = argv.data();
    plan.sh_argv = sh_argv.data();
    plan.envp = envp.data();
    plan.report_fd = report.w;
    plan.status_fd = status.w;
    plan.go_fd = go.r;
    plan.agent_stat_fd = AgentStatFd();
    plan.kill_switch_fd = KillSwitchFd();
    plan.stop_limit_ms = static_cast<int>(spec.stop_limit.count());
    plan.kill_tree_signal = KillTreeSignal();
    if (spec.app_nofile) plan.app_nofile = *spec.app_nofile;
    const long pid = ::syscall(SYS_clone, CloneFlags(isolation) | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) RunKeeper(plan);
    if (pid < 0) {
      last = Status::FromErrno(errno, std::string("creating a ") + IsolationName(isolation));
      RTFT_LOG(kDebug, kLogLaunch) << last;
      continue;
    }
    const pid_t keeper = static_cast<pid_t>(pid);
    report.CloseWrite();
    status.CloseWrite();
    if (user_ns) {
      ::close(go.r);
      go.r = -1;
      if (!WriteIdMaps(keeper)) {
        last = Status::FromErrno(errno, "mapping the user namespace's ids");
        ::kill(keeper, SIGKILL);
        ::waitpid(keeper, nullptr, __WALL);
        continue;
      }
      if (::write(go.w, "g", 1) != 1) {
        last = Status::FromErrno(errno, "starting the keeper");
        ::kill(keeper, SIGKILL);
        ::waitpid(keeper, nullptr, __WALL);
        continue;
      }
    }
    std::vector<KeeperNote> notes;
    Status read = ReadNotes(report.r, &notes);
    std::unique_ptr<ChildProcess> child(new ChildProcess());
    child->keeper_ = keeper;
    child->isolation_ = isolation;
    for (const KeeperNote& n : notes) {
      if (n.kind == KeeperNote::kProcNotMounted)
        child->proc_note_ = std::string("mounting /proc: ") + std::strerror(n.err);
      if (n.kind == KeeperNote::kExecFailed)
        read = Status::FromErrno(n.err, "starting " + spec.argv[0] + " (" + path + ")");
      if (n.kind == KeeperNote::kSetupFailed)
        read = Status::FromErrno(n.err, "the keeper could not start " + spec.argv[0]);
    }
    if (!read.ok()) {
      ::kill(keeper, SIGKILL);  // ends the namespace with it
      ::waitpid(keeper, nullptr, __WALL);
      return read;
    }
    {
      std::lock_guard<std::mutex> lock(g_isolation_mu);
      g_isolation = isolation;
    }
    child->status_fd_ = status.r;
    status.r = -1;
    g_reserve.Fill();  // for the next start
    child->on_exit_ = std::move(on_exit);
    child->reaper_ = std::thread([c = child.get()] { c->Reap(); });
    return child;
  }
  return last;
}

void ChildProcess::Reap() {
  int keeper_status = 0;
  pid_t r;
  do {
    r = ::waitpid(keeper_, &keeper_status, __WALL);
  } while (r < 0 && errno == EINTR);
  int app_status = 0;
  ssize_t n;
  do {
    n = ::read(status_fd_, &app_status, sizeof(app_status));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(app_status)) {
    exit_.wait_status = app_status;
  } else if (r == keeper_ && WIFSIGNALED(keeper_status)) {
    exit_.wait_status = keeper_status;  // the keeper was killed, and the tree with it
  } else {
    exit_.wait_status = SIGKILL;  // unknown: report a kill
  }
  exit_.at = Clock::now();
  done_.store(true, std::memory_order_release);
  if (on_exit_) (void)control::RunGuarded("the application's reaper", on_exit_);
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
  if (reaper_.joinable()) reaper_.join();
  if (status_fd_ >= 0) ::close(status_fd_);
}

}  // namespace rtft::launch
