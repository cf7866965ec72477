// ZeroMQ helpers of the control plane: CURVE socket setup, sending and receiving framed
// messages (codec.h) without exceptions, an eventfd that wakes a polling thread, and a log
// limiter so a flood of bad input cannot flood the log.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "control/wire/codec.h"
#include "control/wire/keys.h"
#include "control/wire/messages.h"
#include "rtft/status.h"

namespace rtft::control {

using SteadyClock = std::chrono::steady_clock;

// A liveness clock `t` moved forward by `lost` (the time the loop that keeps it did not run: its
// silence is the loop's own), never past `now`.
inline SteadyClock::time_point MovedForward(SteadyClock::time_point t, SteadyClock::time_point now,
                                            SteadyClock::duration lost) {
  return now - t <= lost ? std::max(t, now) : t + lost;
}

// Sockets never block the process at exit for longer than this.
constexpr int kLingerMs = 1000;

// Sets the options every control-plane socket has (limits, linger, no IPv6 surprises).
void ConfigureSocket(zmq::socket_t& socket);
void MakeCurveServer(zmq::socket_t& socket, const JobKeys& keys);
void MakeCurveClient(zmq::socket_t& socket, const JobKeys& keys);

// Encodes and sends [routing id,] message without blocking. False (logged) when the message
// could not be encoded or queued.
bool SendTo(zmq::socket_t& socket, const std::string* routing_id, MsgType type,
            const nlohmann::json& body, Generation gen = 0);
// Sends pre-encoded bytes.
bool SendRaw(zmq::socket_t& socket, const std::string* routing_id, const std::string& bytes);

// Receives one multipart message without blocking; nullopt when none is waiting.
std::optional<std::vector<zmq::message_t>> RecvFrames(zmq::socket_t& socket);

// Wakes a thread blocked in zmq::poll from another thread.
class Waker {
 public:
  Waker();
  ~Waker();
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;
  int fd() const { return fd_; }
  void Notify();
  void Drain();

 private:
  int fd_ = -1;
};

// Lets through at most `per_second` warnings a second and counts the rest.
class LogLimiter {
 public:
  explicit LogLimiter(int per_second = 10) : per_second_(per_second) {}
  // True when this one may be logged; *suppressed receives the count dropped since the last one.
  bool Allow(uint64_t* suppressed);

 private:
  int per_second_;
  SteadyClock::time_point window_{};
  int in_window_ = 0;
  uint64_t dropped_ = 0;
};

// Milliseconds until `deadline`, clamped to [0, cap].
int64_t MsUntil(SteadyClock::time_point deadline, int64_t cap);

}  // namespace rtft::control
