// Runs a reading call in a child process with a deadline, for tests of hostile input: a call
// that hangs (a FIFO read) or crashes (memory corruption) fails the test with what happened
// instead of hanging or killing the whole test binary.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "rtft/status.h"

namespace rtft::testing {

struct ChildResult {
  bool returned = false;  // the call returned within the deadline
  int signal = 0;         // the signal that ended the child, if any
  StatusCode code = StatusCode::kOk;
  std::string message;

  std::string Describe() const {
    if (returned) return std::string(StatusCodeName(code)) + ": " + message;
    if (signal) return std::string("the reader died of signal ") + strsignal(signal);
    return "the reader did not return in time (hung)";
  }
};

inline ChildResult RunInChild(const std::function<Status()>& fn,
                              std::chrono::seconds deadline = std::chrono::seconds(20)) {
  ChildResult result;
  int fds[2];
  if (::pipe(fds) != 0) return result;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const Status s = fn();
    const std::string out = std::to_string(static_cast<int>(s.code())) + " " + s.message();
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
    if (result.signal == SIGKILL) result.signal = 0;  // ours: the deadline passed
    return result;
  }
  const size_t space = out.find(' ');
  if (!WIFEXITED(status) || space == std::string::npos) return result;
  result.returned = true;
  result.code = static_cast<StatusCode>(std::stoi(out.substr(0, space)));
  result.message = out.substr(space + 1);
  return result;
}

}  // namespace rtft::testing
