#include "launcher/job_end.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rtft::launch {
namespace {

// The code in an exit-code file; -1 when there is none.
int ReadCode(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  char buf[16] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  char* end = nullptr;
  const long code = std::strtol(buf, &end, 10);
  return end != buf && code >= 0 && code <= 255 ? static_cast<int>(code) : -1;
}

// Writes `code` under a name of its own next to `path`; returns that name, empty on failure.
std::string WriteTemp(const std::string& path, int code) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "dp-launch: writing %s: %s\n", tmp.c_str(), std::strerror(errno));
    return "";
  }
  char text[16];
  const int len = std::snprintf(text, sizeof(text), "%d\n", code);
  const bool ok = ::write(fd, text, len) == len;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return "";
  }
  return tmp;
}

}  // namespace

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kPermissionDenied:
    case StatusCode::kFailedPrecondition:
      return kExitUsage;
    default:
      return kExitJobFailed;
  }
}

void JobEndReport::Final(int code) const {
  if (!path_.empty()) {
    const std::string tmp = WriteTemp(path_, code);
    if (!tmp.empty() && ::rename(tmp.c_str(), path_.c_str()) != 0) {
      std::fprintf(stderr, "dp-launch: writing %s: %s\n", path_.c_str(), std::strerror(errno));
      ::unlink(tmp.c_str());
    }
  }
  Print(code, true);
}

int JobEndReport::IfFirst(int code) const {
  if (!path_.empty()) {
    // link() fails when the file exists: a code another slot (or slot 0) wrote stays.
    const std::string tmp = WriteTemp(path_, code);
    if (!tmp.empty()) {
      if (::link(tmp.c_str(), path_.c_str()) != 0 && errno != EEXIST)
        std::fprintf(stderr, "dp-launch: writing %s: %s\n", path_.c_str(), std::strerror(errno));
      ::unlink(tmp.c_str());
    }
    const int written = ReadCode(path_);
    if (written >= 0) code = written;
  }
  Print(code, false);
  return code;
}

void JobEndReport::Print(int code, bool final) const {
  if (slot_ == 0)
    std::fprintf(stderr, "dp-launch: job exit code %d\n", code);
  else if (final)
    std::fprintf(stderr, "dp-launch: job exit code %d (said by slot %d, the primary coordinator)\n",
                 code, slot_);
  else
    std::fprintf(stderr, "dp-launch: job exit code %d (said by slot %d: slot 0 may not say it)\n",
                 code, slot_);
  std::fflush(stderr);
}

BootstrapWatchdog::BootstrapWatchdog(std::chrono::seconds limit, const JobEndReport& report)
    : limit_(limit), report_(report) {
  auto thread = Thread::Start("rtft-boot-watch", [this] { Run(); });
  if (thread.ok()) {
    thread_ = std::move(*thread);
  } else {
    std::fprintf(stderr, "dp-launch: the bootstrap runs without its deadline: %s\n",
                 thread.status().ToString().c_str());
  }
}

BootstrapWatchdog::~BootstrapWatchdog() {
  Disarm();
  thread_.Join();
}

void BootstrapWatchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  disarmed_ = true;
  cv_.notify_all();
}

void BootstrapWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, limit_, [&] { return disarmed_; })) return;
  std::fprintf(
      stderr,
      "dp-launch: slot %d: the bootstrap did not complete within %lld s (--join-timeout-s):"
      " a slot was lost or stopped during start-up, or never started; this slot ends\n",
      report_.slot(), static_cast<long long>(limit_.count()));
  report_.IfFirst(kExitJobFailed);
  // Another thread may be inside MPI_Init: no destructors, no atexit handlers.
  std::_Exit(kExitJobFailed);
}

}  // namespace rtft::launch
