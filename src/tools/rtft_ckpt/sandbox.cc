#include "tools/rtft_ckpt/sandbox.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/params.h"

namespace rtft::tools {
namespace {

void LimitChild(const SandboxLimits& limits) {
  // The parent's death must not leave a reader behind; no core file of a crafted input either.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  if (limits.memory_bytes > 0) {
    rlimit as{limits.memory_bytes, limits.memory_bytes};
    ::setrlimit(RLIMIT_AS, &as);
  }
}

// Waits for `pid` until `seconds` passed (0: forever); false on the deadline. A pidfd makes the
// wait a poll with a timeout instead of a loop.
bool WaitUntil(pid_t pid, uint64_t seconds, int* status) {
  if (seconds > 0) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
      for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{pidfd, POLLIN, 0};
        const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
        if (ready > 0) break;
        if (ready == 0) {
          ::close(pidfd);
          return false;
        }
        if (errno != EINTR) break;
      }
      ::close(pidfd);
    }
  }
  while (::waitpid(pid, status, 0) < 0) {
    if (errno != EINTR) return true;
  }
  return true;
}

}  // namespace

int RunSandboxed(const SandboxLimits& limits, const std::string& what,
                 const std::function<int()>& command) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "rtft-ckpt: cannot start a reader process: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    LimitChild(limits);
    const int rc = command();
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  int status = 0;
  if (!WaitUntil(pid, limits.seconds, &status)) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr,
                 "rtft-ckpt: %s: reading it did not finish within %llu s (--time-limit); "
                 "treat it as damaged\n",
                 what.c_str(), static_cast<unsigned long long>(limits.seconds));
    return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  const std::string memory =
      limits.memory_bytes > 0
          ? " or ran out of its " + FormatBytes(limits.memory_bytes) + " of memory (--memory-limit)"
          : "";
  std::fprintf(stderr,
               "rtft-ckpt: %s is damaged: reading it crashed the reader (signal %d, %s)%s; it "
               "cannot be trusted\n",
               what.c_str(), sig, strsignal(sig), memory.c_str());
  return 1;
}

}  // namespace rtft::tools
