// The control plane's one ZeroMQ poll loop: a named, guarded thread (core/thread.h) that owns its
// sockets, wakes on an eventfd when another thread queues a message, sends what is queued,
// receives and checks what arrives (the number of frames, the codec's decoding) and hands each
// decoded message to its socket's handler, polls extra items (the coordinator's ZAP handler and
// socket monitor) and calls its owner's timer. The coordinator, the agent client and both ends
// of the local link each run one; their handlers and timers run on the loop's thread, the only
// thread that touches the sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "control/net/zmq_util.h"
#include "control/wire/codec.h"
#include "core/thread.h"
#include "rtft/status.h"

namespace rtft::control {

class EventLoop {
 public:
  using SocketId = int;
  // `peer` is the routing id on a ROUTER socket, empty on a DEALER.
  using Handler = std::function<void(const std::string& peer, Message msg)>;
  // A message refused before any handler saw it: wrong number of frames, or the codec's reason.
  using RejectHandler = std::function<void(const std::string& peer, const std::string& why)>;
  // Called after each round's I/O (and at least every `max_wait`) with the time; returns when it
  // wants to be called next.
  using Timer = std::function<SteadyClock::time_point(SteadyClock::time_point now)>;

  struct Options {
    std::string thread_name = "rtft-ctl";
    std::string what = "a control-plane thread";  // for the guard's message
    std::chrono::milliseconds max_wait{200};      // the longest poll
    // At most this many messages are taken from one socket per round, so timers stay timely
    // under a flood.
    int batch = 4096;
    // Fault seam for tests: called at the top of every round; what it throws ends the thread
    // with a recorded error, never the process.
    std::function<void()> fault_point;
    // Called on the loop's thread once, when the thread ends with an error (the error()).
    std::function<void(const Status&)> on_error;
  };

  explicit EventLoop(Options options);
  ~EventLoop();  // stops the thread, then closes the sockets (linger 0)
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Before Start(), or on the loop's thread. `name` prefixes the loop's log lines; without
  // `on_reject` a refused message is logged (at most ten lines a second).
  SocketId AddSocket(zmq::socket_t socket, bool router, std::string name, Handler on_message,
                     RejectHandler on_reject = nullptr);
  // Closes the socket at once (linger 0) and drops what was queued for it; on the loop's thread.
  void RemoveSocket(SocketId id);
  // A socket polled for input whose reading is the owner's (ZAP, monitor); before Start().
  void AddPoller(zmq::socket_t* socket, std::function<void()> on_readable);
  void SetTimer(Timer timer);  // before Start()
  Status Start();
  // Ends the thread (joins it); the sockets stay open until the destructor. Owners call it
  // before they destroy what the handlers use (the loop itself included).
  void Stop();

  // Any thread: queues `bytes` for `peer` on the socket and wakes the loop. The loop's error once
  // its thread ended with one.
  Status Post(SocketId id, const std::string& peer, std::string bytes);
  // Encodes first (InvalidArgument for a body the receiver would reject).
  Status Post(SocketId id, const std::string& peer, MsgType type, const nlohmann::json& body,
              Generation gen = 0);
  // The loop's thread only: sends at once, without blocking. False when it could not be queued.
  bool SendNow(SocketId id, const std::string& peer, const std::string& bytes);
  bool SendNow(SocketId id, const std::string& peer, MsgType type, const nlohmann::json& body,
               Generation gen = 0);
  // The loop's thread only: whether `id` is open (not removed).
  bool open(SocketId id) const;
  // The loop's thread only (or before Start()).
  zmq::socket_t& socket(SocketId id);
  // Wakes the loop so that its timer runs now.
  void Wake() {
    force_timer_ = true;
    waker_.Notify();
  }
  // Ok while the thread runs (or ended cleanly); the error that ended it otherwise.
  Status error() const;

 private:
  struct Entry {
    zmq::socket_t socket;
    bool router = false;
    std::string name;
    Handler on_message;
    RejectHandler on_reject;
    LogLimiter log_limit;
    bool open = true;
  };
  struct Outgoing {
    SocketId id;
    std::string peer;
    std::string bytes;
  };

  void Run();
  void Flush();
  void Receive(SocketId id);
  void Refuse(Entry& e, const std::string& peer, const std::string& why);

  Options options_;
  std::deque<Entry> sockets_;  // index: SocketId; stable addresses
  std::vector<std::pair<zmq::socket_t*, std::function<void()>>> pollers_;
  Timer timer_;
  Waker waker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> force_timer_{false};
  mutable std::mutex mu_;
  std::deque<Outgoing> outbox_;
  Status error_;
  Thread thread_;
};

}  // namespace rtft::control
