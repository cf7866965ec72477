#include "launcher/keeper_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "core/logging.h"

namespace rtft::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the agent waits for the application's exec (the keeper's report pipe to close).
constexpr std::chrono::seconds kExecDeadline{60};

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

// Ends a keeper that was started but must not go on.
void Abandon(pid_t keeper) {
  ::kill(keeper, SIGKILL);  // in a namespace, everything in it goes too
  ::waitpid(keeper, nullptr, __WALL);
}

// Lets a keeper in a user namespace go on once its ids are mapped.
Status MapUserNamespace(pid_t keeper, Pipe* go) {
  ::close(go->r);
  go->r = -1;
  if (!WriteIdMaps(keeper))
    return Status::Unavailable(std::string("mapping the user namespace's ids: ") +
                               std::strerror(errno));
  if (::write(go->w, "g", 1) != 1)
    return Status::Unavailable(std::string("starting the keeper: ") + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

// The agent's request to end a tree (keeper.h): a real-time signal nothing else sends.
int KillTreeSignal() { return SIGRTMIN + 4; }

void FillDescriptorReserve() { g_reserve.Fill(); }

AppImage::AppImage(std::string path, const std::vector<std::string>& argv,
                   std::vector<std::string> env)
    : path_(std::move(path)), args_(argv), env_(std::move(env)) {
  for (auto& a : args_) argv_.push_back(a.data());
  argv_.push_back(nullptr);
  sh_argv_.push_back(const_cast<char*>("/bin/sh"));
  sh_argv_.push_back(path_.data());
  for (size_t i = 1; i < args_.size(); ++i) sh_argv_.push_back(args_[i].data());
  sh_argv_.push_back(nullptr);
  for (auto& e : env_) envp_.push_back(e.data());
  envp_.push_back(nullptr);
}

StatusOr<StartedKeeper> StartKeeper(Isolation isolation, const AppImage& image,
                                    const KeeperOptions& options) {
  if (AgentStatFd() < 0) return Status::FromErrno(errno, "/proc/self/stat");
  Pipe report, status, go;
  RTFT_RETURN_IF_ERROR(report.Open());
  RTFT_RETURN_IF_ERROR(status.Open());
  const bool user_ns = isolation == Isolation::kUserPidNamespace;
  if (user_ns) RTFT_RETURN_IF_ERROR(go.Open());
  KeeperPlan plan;
  plan.isolation = isolation;
  plan.path = image.path().c_str();
  plan.argv = image.argv();
  plan.sh_argv = image.sh_argv();
  plan.envp = image.envp();
  plan.report_fd = report.w;
  plan.status_fd = status.w;
  plan.go_fd = go.r;
  plan.agent_stat_fd = AgentStatFd();
  plan.kill_switch_fd = KillSwitchFd();
  plan.stop_limit_ms = options.stop_limit_ms;
  plan.kill_tree_signal = KillTreeSignal();
  if (options.app_nofile) plan.app_nofile = *options.app_nofile;
  // A fork without glibc's fork handlers, into the namespaces: the keeper calls nothing that
  // could need them (keeper.h).
  const long pid = ::syscall(SYS_clone, CloneFlags(isolation) | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) RunKeeper(plan);
  if (pid < 0)
    return Status::Unavailable(std::string("creating a ") + IsolationName(isolation) + ": " +
                               std::strerror(errno));
  StartedKeeper k;
  k.pid = static_cast<pid_t>(pid);
  report.CloseWrite();
  status.CloseWrite();
  if (user_ns) {
    Status s = MapUserNamespace(k.pid, &go);
    if (!s.ok()) {
      Abandon(k.pid);
      return s;
    }
  }
  std::vector<KeeperNote> notes;
  Status read = ReadNotes(report.r, &notes);
  for (const KeeperNote& n : notes) {
    if (n.kind == KeeperNote::kProcNotMounted)
      k.proc_note = std::string("mounting /proc: ") + std::strerror(n.err);
    if (n.kind == KeeperNote::kExecFailed)
      read = Status::FromErrno(n.err, "starting " + image.name() + " (" + image.path() + ")");
    if (n.kind == KeeperNote::kSetupFailed)
      read = Status::FromErrno(n.err, "the keeper could not start " + image.name());
  }
  if (!read.ok()) {
    Abandon(k.pid);
    // Not a refused isolation: the same would happen under any other.
    return read.code() == StatusCode::kUnavailable ? Status::Internal(read.message()) : read;
  }
  k.status_fd = status.r;
  status.r = -1;
  g_reserve.Fill();  // for the next start
  return k;
}

}  // namespace rtft::launch
