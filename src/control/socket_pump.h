// A thread that owns one ZeroMQ socket: other threads queue outgoing messages (thread-safe), and
// every decoded incoming message goes to a handler on the pump's thread. Used by both ends of
// the local link; malformed input is logged and dropped there.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "control/codec.h"
#include "control/zmq_util.h"
#include "core/thread.h"

namespace rtft::control {

class SocketPump {
 public:
  // `peer` is the routing id for ROUTER sockets, empty for DEALER sockets.
  using Handler = std::function<void(const std::string& peer, Message msg)>;

  SocketPump(zmq::context_t* ctx, zmq::socket_t socket, bool router, Handler handler);
  ~SocketPump();
  SocketPump(const SocketPump&) = delete;
  SocketPump& operator=(const SocketPump&) = delete;

  // Encodes and queues; fails when the body does not encode, or when the pump's thread ended
  // with an error (an exception from the handler, say): that error.
  Status Send(const std::string& peer, MsgType type, const nlohmann::json& body);
  // Ok while the thread runs; the error that ended it otherwise.
  Status error() const;

 private:
  void Run();

  zmq::socket_t socket_;
  const bool router_;
  Handler handler_;
  Waker waker_;
  mutable std::mutex mu_;
  std::deque<std::pair<std::string, std::string>> outbox_;
  Status error_;
  std::atomic<bool> stop_{false};
  LogLimiter log_limit_;
  Thread thread_;
};

}  // namespace rtft::control
