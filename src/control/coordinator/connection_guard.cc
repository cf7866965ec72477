#include "control/coordinator/connection_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "core/logging.h"

namespace rtft::control {
namespace {

size_t OpenDescriptors() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

std::string PeerOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

const char* FailureName(uint16_t event) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return "protocol error";
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return "not the job's key";
    default:
      return "closed or timed out before the CURVE handshake completed";
  }
}

}  // namespace

size_t PendingConnectionBudget(int slots, size_t reserve) {
  rlimit rl{};
  size_t limit = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    limit = static_cast<size_t>(rl.rlim_cur);
  else if (rl.rlim_cur == RLIM_INFINITY)
    limit = 1 << 20;
  const size_t used = OpenDescriptors() + reserve + static_cast<size_t>(std::max(slots, 0));
  const size_t room = limit > used ? (limit - used) / 2 : 0;
  const size_t floor = static_cast<size_t>(std::max(slots, 0)) + 16;
  return std::max(floor, std::min<size_t>(room, 1024));
}

uint64_t ConnectionGuard::OnEvent(uint16_t event, uint32_t value, SteadyClock::time_point now) {
  Age(now);
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      Accepted(static_cast<int>(value), now);
      return 0;
    case ZMQ_EVENT_DISCONNECTED:
      return Disconnected(static_cast<int>(value));
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      failed_ = std::make_pair(event, value);
      return 0;
    default:
      return 0;
  }
}

void ConnectionGuard::Accepted(int fd, SteadyClock::time_point now) {
  Connection& c = by_fd_[fd];
  if (c.generation != 0 && c.pending) --pending_;  // a DISCONNECTED was lost (monitor overflow)
  c.peer = PeerOf(fd);
  c.generation = next_generation_++;
  c.accepted_at = now;
  c.pending = true;
  c.closed_here = false;
  ++pending_;
  recent_.push_back({fd, c.generation, now});
  if (pending_ <= options_.max_pending) return;
  // Over the cap: close it now. libzmq notices the shutdown, drops the connection and reports
  // DISCONNECTED, which removes it here.
  ++closed_over_cap_;
  c.closed_here = true;
  // Closed, so no longer in its handshake: counted until its DISCONNECTED (or the window) it
  // would keep a job's own agents out for good, their reconnects (every 100 ms) closed faster
  // than they age out.
  c.pending = false;
  --pending_;
  ::shutdown(fd, SHUT_RDWR);
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed))
    RTFT_LOG(kWarn, kLogCtrl) << "closed connection from " << c.peer << ": " << pending_
                              << " connections are already in their handshake (limit "
                              << options_.max_pending << ")"
                              << (suppressed ? " (" + std::to_string(suppressed) +
                                                   " more refusals not logged)"
                                             : std::string());
}

uint64_t ConnectionGuard::Disconnected(int fd) {
  auto it = by_fd_.find(fd);
  const std::string peer = it == by_fd_.end() ? "?" : it->second.peer;
  const bool closed_here = it != by_fd_.end() && it->second.closed_here;
  if (it != by_fd_.end()) {
    if (it->second.pending) --pending_;
    by_fd_.erase(it);
  }
  if (!failed_) return 0;
  const uint16_t event = failed_->first;
  const uint32_t value = failed_->second;
  failed_.reset();
  // Refusals by the ZAP handler were logged there, with the client key; connections closed
  // over the cap when they were accepted.
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return 0;
  if (closed_here) return 1;
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed))
    RTFT_LOG(kWarn, kLogCtrl) << "refused connection from " << peer << ": " << FailureName(event)
                              << " (" << value << "; a peer without the job's keys?)"
                              << (suppressed ? " (" + std::to_string(suppressed) +
                                                   " more refusals not logged)"
                                             : std::string());
  return 1;
}

void ConnectionGuard::Age(SteadyClock::time_point now) {
  while (!recent_.empty() && now - recent_.front().at >= options_.handshake_window) {
    const Accept a = recent_.front();
    recent_.pop_front();
    auto it = by_fd_.find(a.fd);
    if (it != by_fd_.end() && it->second.generation == a.generation && it->second.pending) {
      // libzmq would have dropped it by now had it not authenticated.
      it->second.pending = false;
      --pending_;
    }
  }
}

}  // namespace rtft::control
