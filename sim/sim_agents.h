// Simulated agents for `rtft-bench detect --sim`: many CURVE DEALER sockets on one driver
// thread, each saying hello, heartbeating on a staggered schedule and recording when each event
// arrives. Heartbeat acks and most events are recognised by their header, not decoded.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "control/wire/keys.h"
#include "control/wire/types.h"

namespace rtft::bench {

// The progress sample a simulated agent's heartbeat carries (docs/control-protocol.md,
// "Heartbeat"): an application that begins a call per beat and is never inside one, so the
// primary's hang detector sees steady progress and the heartbeat its full size.
inline control::CallProgress SampleOf(uint64_t seq) {
  control::CallProgress p;
  p.calls = seq;
  p.age_ms = 0;
  return p;
}

// The work a simulated agent's heartbeat carries: one step of 10 ms per beat, the same on every
// agent, so the primary's straggler detector sees no slow rank and the heartbeat its full size.
inline control::StepWork WorkOf(uint64_t) { return control::StepWork{10000, 1}; }

// When an agent's next heartbeat is due after one sent at `now` that was due at `due`: on its
// own schedule (`due` plus whole periods, the first after `now`), so that agents a busy driver
// delayed together do not all fall due again in one scan.
template <typename TimePoint, typename Duration>
TimePoint NextBeat(TimePoint due, TimePoint now, Duration period) {
  return due + period * ((now - due) / period + 1);
}

// One epoll set over many ZeroMQ sockets' ZMQ_FDs, each under its index: with thousands of
// sockets, zmq::poll or a non-blocking recv on every socket costs a system call per socket and
// tick. A ready ZMQ_FD only says that the socket has commands to process; ZMQ_EVENTS then tells
// whether a message waits. Used by both simulations' driver threads.
class SocketEpoll {
 public:
  SocketEpoll();
  ~SocketEpoll();
  SocketEpoll(const SocketEpoll&) = delete;
  SocketEpoll& operator=(const SocketEpoll&) = delete;
  bool ok() const { return fd_ >= 0; }
  void Add(zmq::socket_t& socket, uint64_t index);
  void Remove(zmq::socket_t& socket);
  // The indices of the sockets that became ready within `timeout_ms` (0: none waited for).
  const std::vector<uint64_t>& Wait(int timeout_ms);

 private:
  int fd_;
  std::vector<uint64_t> ready_;
};

class SimAgents {
 public:
  using Clock = std::chrono::steady_clock;
  SimAgents(const control::JobKeys& keys, const std::string& endpoint,
            std::vector<control::SlotId> slots, std::chrono::milliseconds period);
  ~SimAgents();

  void Start();
  // Stops the slot's heartbeats and closes its socket, as a SIGKILL would.
  void Kill(control::SlotId slot);
  // Agents that received their first assignment.
  int joined() const { return joined_; }
  // Live agents that have seen `epoch`, and the latest time one of them first saw it.
  int SawEpoch(uint64_t epoch, Clock::time_point* last) const;
  size_t live() const;
  // Events whose epoch was not the expected one (checked on one agent per driver).
  int bad_events() const { return bad_events_; }
  // The size of the newest event the first agent received (the epoch's delta after the first).
  size_t last_event_bytes() const { return last_event_bytes_; }

 private:
  struct Agent {
    control::SlotId slot;
    zmq::socket_t socket;
    Clock::time_point next_beat;
    uint64_t seq = 0;
    bool joined = false;
    bool dead = false;
    std::vector<std::pair<uint64_t, Clock::time_point>> epochs;  // first sight of each epoch
  };
  void Run();
  void Receive(Agent& a);

  zmq::context_t ctx_;
  std::chrono::milliseconds period_;
  std::vector<Agent> agents_;
  std::atomic<int> joined_{0};
  std::atomic<int> bad_events_{0};
  std::atomic<size_t> last_event_bytes_{0};
  std::atomic<int> kill_{-1};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // agents_[i].epochs and dead
  std::thread thread_;
};

}  // namespace rtft::bench
