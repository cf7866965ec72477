// The coordinator's watch over the TCP connections its port accepts, fed with its socket
// monitor's events. libzmq accepts any number of connections and holds each one open for the
// handshake interval before it knows who is at the other end, so a stranger without the job's
// keys could take every descriptor slot 0 has (and the next restart of its application would
// fail). The guard caps the connections that are still in their handshake, closing the excess as
// it is accepted, and names the peer of every refused handshake in the log, at most ten lines a
// second. Used by the coordinator's ZapHandler (zap.h), on the coordinator's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "control/net/zmq_util.h"

namespace rtft::control {

struct ConnectionGuardOptions {
  // Connections accepted less than this long ago are counted as not yet authenticated: libzmq
  // drops a connection whose handshake takes longer (ZMQ_HANDSHAKE_IVL, set to the same).
  std::chrono::milliseconds handshake_window{5000};
  // At most this many such connections; one accepted beyond is closed at once.
  size_t max_pending = 256;
};

// How many connections may be in their handshake at once, from the descriptor budget: what is
// left of RLIMIT_NOFILE after the descriptors open now, `reserve` kept for the process's own
// work, and one per agent, halved (so a burst accepted before the guard sees it still fits),
// between `slots` + 16 and 1024.
size_t PendingConnectionBudget(int slots, size_t reserve);

class ConnectionGuard {
 public:
  explicit ConnectionGuard(const ConnectionGuardOptions& options) : options_(options) {}

  // One event of the socket monitor (ZMQ_EVENT_ACCEPTED, _DISCONNECTED, _HANDSHAKE_*) and its
  // value (the descriptor for ACCEPTED and DISCONNECTED). Returns 1 when it ends a refused
  // handshake (counted as a rejected peer), else 0.
  uint64_t OnEvent(uint16_t event, uint32_t value, SteadyClock::time_point now);

  size_t open() const { return by_fd_.size(); }
  size_t pending() const { return pending_; }
  uint64_t closed_over_cap() const { return closed_over_cap_; }

 private:
  struct Connection {
    std::string peer;  // "address:port"
    uint64_t generation = 0;
    SteadyClock::time_point accepted_at;
    bool pending = true;
    bool closed_here = false;  // closed over the cap (logged then)
  };
  void Accepted(int fd, SteadyClock::time_point now);
  uint64_t Disconnected(int fd);
  void Age(SteadyClock::time_point now);

  const ConnectionGuardOptions options_;
  std::unordered_map<int, Connection> by_fd_;
  // Accepted connections in order, to age them out of `pending_` (fd, generation, when).
  struct Accept {
    int fd;
    uint64_t generation;
    SteadyClock::time_point at;
  };
  std::deque<Accept> recent_;
  size_t pending_ = 0;
  uint64_t next_generation_ = 1;
  uint64_t closed_over_cap_ = 0;
  // A handshake failure waits for the DISCONNECTED of its connection, which libzmq's I/O thread
  // reports right after it: that event names the descriptor, hence the peer.
  std::optional<std::pair<uint16_t, uint32_t>> failed_;
  LogLimiter log_limit_;
};

}  // namespace rtft::control
