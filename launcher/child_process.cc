#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace rtft::launch {
namespace {

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

}  // namespace

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
  // Everything the child needs is built before fork: only async-signal-safe calls follow it.
  std::vector<std::string> env = BuildEnvironment(spec);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // A pipe closed on exec tells the parent whether exec worked.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2");
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return Status::FromErrno(err, "fork");
  }
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before the line above
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = write(fds[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  close(fds[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(fds[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(fds[0]);
  if (n == sizeof(exec_errno)) {
    waitpid(pid, nullptr, 0);
    return Status::FromErrno(exec_errno, "starting " + spec.argv[0]);
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->on_exit_ = std::move(on_exit);
  child->reaper_ = std::thread([c = child.get()] { c->Reap(); });
  return child;
}

void ChildProcess::Reap() {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  exit_.wait_status = r == pid_ ? status : SIGKILL;  // unknown: report a kill
  exit_.at = std::chrono::steady_clock::now();
  done_.store(true, std::memory_order_release);
  if (on_exit_) on_exit_();
}

std::optional<ChildExit> ChildProcess::exited() const {
  if (!done_.load(std::memory_order_acquire)) return std::nullopt;
  return exit_;
}

void ChildProcess::Signal(int sig) const {
  if (!done_.load(std::memory_order_acquire)) kill(pid_, sig);
}

ChildProcess::~ChildProcess() {
  if (!done_.load(std::memory_order_acquire)) kill(pid_, SIGKILL);
  if (reaper_.joinable()) reaper_.join();
}

}  // namespace rtft::launch
