#include "core/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace rtft {

ProgressMonitor& ProgressMonitor::Get() {
  static ProgressMonitor monitor;
  return monitor;
}

ProgressSample ProgressMonitor::Sample() const {
  ProgressSample s;
  s.calls = calls_.load(std::memory_order_relaxed);
  s.in_call = depth_.load(std::memory_order_relaxed) > 0;
  s.peer = s.in_call ? peer_.load(std::memory_order_relaxed) : -1;
  s.long_phase = long_.load(std::memory_order_relaxed) > 0;
  return s;
}

std::optional<uint64_t> ThreadRunDelayNanos() {
  const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[128];
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  unsigned long long on_cpu = 0, waited = 0;
  if (std::sscanf(text, "%llu %llu", &on_cpu, &waited) != 2) return std::nullopt;
  return static_cast<uint64_t>(waited);
}

}  // namespace rtft
