#include "launcher/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace rtft::launch {

const char* IsolationName(Isolation isolation) {
  switch (isolation) {
    case Isolation::kPidNamespace:
      return "PID namespace";
    case Isolation::kUserPidNamespace:
      return "user and PID namespace";
    case Isolation::kProcessGroup:
      return "process group under a subreaper";
  }
  return "?";
}

namespace {

// Everything below runs in the keeper, a forked copy of a multithreaded process: system calls
// only, no allocation, no locks, no stdio.

// How often the keeper looks at its agent's state.
constexpr int kWatchMs = 100;

void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void Note(int fd, int32_t kind, int32_t err) {
  KeeperNote note;
  note.kind = kind;
  note.err = err;
  WriteAll(fd, &note, sizeof(note));
}

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

char* AppendText(char* p, const char* s) {
  while (*s) *p++ = *s++;
  return p;
}

char* AppendInt(char* p, long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

// Field 3 (the state) of a /proc/<pid>/stat line of `n` bytes, "pid (comm) S ...": comm may hold
// spaces and parentheses, so it follows the last ')'. Null when there is none.
const char* StatState(const char* buf, ssize_t n) {
  for (ssize_t i = n - 1; i >= 0; --i)
    if (buf[i] == ')') return i + 2 < n ? buf + i + 2 : nullptr;
  return nullptr;
}

// The agent's state letter from /proc/<agent>/stat (R, S, D, T, t, Z, ...); 0 once it is gone.
char AgentState(int fd) {
  char buf[512];
  ssize_t n = pread(fd, buf, sizeof(buf), 0);
  if (n <= 0) return 0;
  const char* state = StatState(buf, n);
  return state ? *state : 0;
}

bool AgentGone(char state) { return state == 0 || state == 'Z' || state == 'X'; }

void CloseRange(unsigned lo, unsigned hi) {
  if (lo > hi) return;
#ifdef SYS_close_range
  if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
#endif
  // Kernels before 5.9: one by one, up to the descriptor limit.
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  const unsigned top = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536
                           ? 65536u
                           : static_cast<unsigned>(rl.rlim_cur);
  for (unsigned fd = lo; fd <= hi && fd < top; ++fd) close(static_cast<int>(fd));
}

// The keeper holds a copy of every descriptor of the agent (sockets, the coordinator's port):
// it keeps only its own pipes, and the application starts with those closed on exec.
void CloseOtherDescriptors(const KeeperPlan& p) {
  int keep[] = {p.report_fd, p.status_fd, p.go_fd, p.agent_stat_fd, p.kill_switch_fd};
  const int n = sizeof(keep) / sizeof(keep[0]);
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  unsigned lo = 3;
  for (int fd : keep) {
    if (fd < static_cast<int>(lo)) continue;
    CloseRange(lo, static_cast<unsigned>(fd) - 1);
    lo = static_cast<unsigned>(fd) + 1;
  }
  CloseRange(lo, ~0u);
}

void BlockedSignals(const KeeperPlan& p, sigset_t* set) {
  sigemptyset(set);
  for (int sig : kRelayedSignals) sigaddset(set, sig);
  sigaddset(set, SIGCHLD);
  sigaddset(set, p.kill_tree_signal);
}

// The application's end of its life pipe at kLifeFd, open across exec (keeper.h); false when it
// cannot be (the application then starts without one).
bool PlaceLifeFd(int life_w, int* report_fd) {
  if (life_w < 0) return false;
  if (life_w == kLifeFd) return fcntl(life_w, F_SETFD, 0) == 0;
  if (*report_fd == kLifeFd) {
    const int moved = fcntl(*report_fd, F_DUPFD_CLOEXEC, kLifeFd + 1);
    if (moved < 0) return false;
    *report_fd = moved;
  }
  return dup2(life_w, kLifeFd) == kLifeFd;  // the copy is open across exec, life_w is not
}

[[noreturn]] void ExecApplication(const KeeperPlan& p, int signal_fd, int life_w) {
  close(signal_fd);  // first: it may hold kLifeFd's number
  int report_fd = p.report_fd;
  PlaceLifeFd(life_w, &report_fd);
  setpgid(0, 0);  // a group of its own: signals are relayed to the whole group
  // Outside a namespace nothing ends the application with a SIGKILLed keeper but this.
  if (p.isolation == Isolation::kProcessGroup) prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (p.app_nofile.rlim_cur != 0) setrlimit(RLIMIT_NOFILE, &p.app_nofile);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigset_t set;
  BlockedSignals(p, &set);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig == SIGPIPE || sigismember(&set, sig) == 1) sigaction(sig, &dfl, nullptr);
  sigemptyset(&set);
  sigprocmask(SIG_SETMASK, &set, nullptr);
  execve(p.path, p.argv, p.envp);
  if (errno == ENOEXEC) execve("/bin/sh", p.sh_argv, p.envp);  // a script without "#!"
  Note(report_fd, KeeperNote::kExecFailed, errno);
  _exit(127);
}

// Parses the unsigned decimal at `p` (up to the next non-digit); false when there is none.
bool ParseField(const char* p, const char* end, unsigned long* value) {
  unsigned long v = 0;
  bool any = false;
  for (; p < end && *p >= '0' && *p <= '9' && v < (1ul << 40); ++p) {
    v = v * 10 + static_cast<unsigned long>(*p - '0');
    any = true;
  }
  *value = v;
  return any;
}

class Keeper {
 public:
  explicit Keeper(const KeeperPlan& plan) : p_(plan) {
    char* end = AppendText(children_path_, "/proc/");
    const long self = syscall(SYS_getpid);
    end = AppendInt(end, self);
    end = AppendText(end, "/task/");
    end = AppendInt(end, self);
    end = AppendText(end, "/children");
    *end = '\0';
  }

  [[noreturn]] void Run() {
    sigset_t set;
    BlockedSignals(p_, &set);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    prctl(PR_SET_NAME, "dp-keeper");  // in ps and /proc/<pid>/comm; not "dp-launch"
    const bool in_namespace = p_.isolation != Isolation::kProcessGroup;
    // In a namespace, the kernel ends the whole tree with the keeper; outside, the keeper must
    // survive its agent long enough to end the tree itself.
    prctl(PR_SET_PDEATHSIG, in_namespace ? SIGKILL : p_.kill_tree_signal);
    if (p_.go_fd >= 0) {
      char byte;
      ssize_t n;
      do {
        n = read(p_.go_fd, &byte, 1);
      } while (n < 0 && errno == EINTR);
      if (n != 1) _exit(1);  // the agent gave up (or died) before the maps were written
    }
    // The agent may have died before the prctl above: then no signal comes.
    if (AgentGone(AgentState(p_.agent_stat_fd))) _exit(1);
    setpgid(0, 0);  // not in the agent's group: a signal to that group reaches the agent only
    if (!in_namespace) prctl(PR_SET_CHILD_SUBREAPER, 1);
    CloseOtherDescriptors(p_);
    // /proc/<pid> names the keeper's children where /proc is the namespace's (or the host's,
    // outside a namespace).
    proc_ok_ = !in_namespace || MountProc();
    signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
    if (signal_fd_ < 0) Fail(errno);
    // Without it the application's ending is seen when the tree is reaped, as before.
    int life[2] = {-1, -1};
    if (proc_ok_ && pipe2(life, O_CLOEXEC) != 0) life[0] = life[1] = -1;
    const long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) Fail(errno);
    if (pid == 0) ExecApplication(p_, signal_fd_, life[1]);
    app_ = static_cast<pid_t>(pid);
    if (life[1] >= 0) close(life[1]);
    life_fd_ = life[0];
    char* end = AppendText(app_stat_path_, "/proc/");
    end = AppendInt(end, app_);
    end = AppendText(end, "/stat");
    *end = '\0';
    close(p_.report_fd);  // the application's copy closes on exec: the agent then sees EOF
    if (p_.go_fd >= 0) close(p_.go_fd);
    Loop();
  }

 private:
  [[noreturn]] void Fail(int err) {
    Note(p_.report_fd, KeeperNote::kSetupFailed, err);
    _exit(1);
  }

  // A /proc of the namespace, so that the application's /proc/<getpid()> is itself. Mounts are
  // made slaves first: nothing mounted here propagates back to the host.
  bool MountProc() {
    if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      Note(p_.report_fd, KeeperNote::kProcNotMounted, errno);
      return false;
    }
    return true;
  }

  [[noreturn]] void Loop() {
    while (true) {
      if (app_done_ && !ending_ && !term_relayed_) KillTree();
      // An ending application closes its descriptors before it can be reaped: its hang-up is
      // taken first, before the reaping and before any signal that came after it.
      CheckLife();
      if (ReapAll() && app_done_) break;
      // The life pipe is polled for its hang-up only: bytes written into it wake nothing.
      pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {life_fd_, 0, 0}};
      if (poll(fds, life_fd_ >= 0 ? 2 : 1, kWatchMs) > 0) {
        if (life_fd_ >= 0 && (fds[1].revents & (POLLHUP | POLLERR))) LifePipeClosed();
        if (fds[0].revents & POLLIN) ReadSignals();
      }
      if (ending_) KillTree();  // again: orphans adopted since the last round
      WatchAgent();
    }
    KeeperStatus ended;
    ended.kind = KeeperStatus::kEnded;
    ended.status = app_status_;
    WriteAll(p_.status_fd, &ended, sizeof(ended));
    if (kill_agent_) WriteAll(p_.kill_switch_fd, "k", 1);
    _exit(0);
  }

  void CheckLife() {
    if (life_fd_ < 0) return;
    pollfd life = {life_fd_, 0, 0};
    if (poll(&life, 1, 0) > 0 && (life.revents & (POLLHUP | POLLERR))) LifePipeClosed();
  }

  // Every copy of the life pipe's write end is closed: the application closed it, or ended (the
  // kernel closes an ending process's descriptors before it releases what its drivers hold). An
  // ending the kernel has marked (PF_EXITING in /proc/<pid>/stat, with the wait status it will
  // report) goes to the agent at once; anything else is left to the reaping.
  void LifePipeClosed() {
    close(life_fd_);
    life_fd_ = -1;
    if (app_done_) return;
    int status = 0;
    if (!AppExiting(&status) || status == 0) return;
    KeeperStatus exiting;
    exiting.kind = KeeperStatus::kExiting;
    exiting.status = status;
    WriteAll(p_.status_fd, &exiting, sizeof(exiting));
  }

  // /proc/<app>/stat: "pid (comm) state ..." with the kernel's flags in field 9 and the exit
  // status in field 52 (Linux 3.5 and later; 0 where not permitted to read it).
  bool AppExiting(int* status) {
    constexpr unsigned long kPfExiting = 0x4;
    const int fd = open(app_stat_path_, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[1024];
    ssize_t n;
    do {
      n = read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return false;
    const char* end = buf + n;
    const char* p = StatState(buf, n);
    if (!p) return false;
    unsigned long flags = 0, code = 0;
    bool have_flags = false, have_code = false;
    for (int field = 3; p < end; ++field) {
      if (field == 9) have_flags = ParseField(p, end, &flags);
      if (field == 52) {
        have_code = ParseField(p, end, &code);
        break;
      }
      while (p < end && *p != ' ') ++p;
      ++p;
    }
    if (!have_flags || !have_code || !(flags & kPfExiting) || code > 0xffff) return false;
    *status = static_cast<int>(code);
    return true;
  }

  // Reaps every child that ended; true when the keeper has no child left.
  bool ReapAll() {
    while (true) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG | __WALL);
      if (pid == 0) return false;
      if (pid < 0) return errno == ECHILD;
      if (pid == app_) {
        app_status_ = status;
        app_done_ = true;
      }
    }
  }

  void ReadSignals() {
    signalfd_siginfo info[16];
    const ssize_t n = read(signal_fd_, info, sizeof(info));
    for (ssize_t i = 0; n > 0 && i < n / static_cast<ssize_t>(sizeof(info[0])); ++i) {
      const int sig = static_cast<int>(info[i].ssi_signo);
      if (sig == SIGCHLD) continue;  // reaped at the top of the loop
      if (sig == p_.kill_tree_signal) {
        KillTree();
        continue;
      }
      // To the application's group (a wrapper script and what it started); to the application
      // alone when it left its group.
      if (kill(-app_, sig) != 0) kill(app_, sig);
      if (sig != SIGUSR1 && sig != SIGUSR2) term_relayed_ = true;
    }
  }

  // Ends every process of the tree. In a namespace that is every process but the keeper. As a
  // subreaper, the application's group and every child of the keeper: the application and the
  // orphans of the tree, which the kernel hands to the nearest subreaper; called again every
  // round until none is left.
  void KillTree() {
    ending_ = true;
    if (p_.isolation != Isolation::kProcessGroup) {
      kill(-1, SIGKILL);
      return;
    }
    kill(-app_, SIGKILL);
    const int fd = open(children_path_, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096];
    long pid = 0;
    bool in_number = false;
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
          in_number = true;
        } else if (in_number) {
          KillChild(static_cast<pid_t>(pid));
          pid = 0;
          in_number = false;
        }
      }
    }
    if (in_number) KillChild(static_cast<pid_t>(pid));
    close(fd);
  }

  static void KillChild(pid_t pid) {
    if (pid <= 1) return;
    kill(-pid, SIGKILL);  // its group, when it leads one (a daemon after setsid)
    kill(pid, SIGKILL);
  }

  void WatchAgent() {
    const char state = AgentState(p_.agent_stat_fd);
    if (AgentGone(state)) {
      KillTree();
      return;
    }
    if (state != 'T' && state != 't') {
      stopped_since_ = -1;
      return;
    }
    const int64_t now = NowMs();
    if (stopped_since_ < 0) stopped_since_ = now;
    if (p_.stop_limit_ms > 0 && now - stopped_since_ >= p_.stop_limit_ms && !kill_agent_) {
      kill_agent_ = true;
      KillTree();
    }
  }

  const KeeperPlan& p_;
  char children_path_[96];
  int signal_fd_ = -1;
  int life_fd_ = -1;      // read end of the application's life pipe, until it hangs up
  bool proc_ok_ = false;  // /proc/<app_> is the application
  char app_stat_path_[48];
  pid_t app_ = -1;
  int app_status_ = 0;
  bool app_done_ = false;
  bool ending_ = false;        // the tree is being killed
  bool term_relayed_ = false;  // a terminating signal went to the application: let it finish
  bool kill_agent_ = false;    // the agent stayed stopped: end it too, once the tree is gone
  int64_t stopped_since_ = -1;
};

}  // namespace

void RunKeeper(const KeeperPlan& plan) {
  Keeper keeper(plan);
  keeper.Run();
}

}  // namespace rtft::launch
