// The coordinator's gatekeeper: the ZAP handler (RFC 27) that admits only CURVE clients holding
// the job's client key, and a socket monitor whose events feed the connection guard
// (connection_guard.h): it caps connections still in their handshake and logs failed handshakes
// (wrong server key, garbage on the port) with the peer's address. Both run on the coordinator's
// event loop, beside its router. Refusals are logged at most ten lines a second.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "control/coordinator/connection_guard.h"
#include "control/net/event_loop.h"
#include "rtft/status.h"

namespace rtft::control {

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `ctx`; there can be one per context.
  static StatusOr<std::unique_ptr<ZapHandler>> Create(zmq::context_t& ctx,
                                                      const std::string& client_public_z85,
                                                      const ConnectionGuardOptions& guard);
  // Watches `socket`'s handshakes; call before it binds.
  Status Monitor(zmq::socket_t& socket);
  // Polls the ZAP socket and the monitor on `loop`, whose thread then answers the ZAP requests
  // and reads the monitor's events; `on_refused` gets the number of peers each batch refused.
  void Attach(EventLoop* loop, std::function<void(uint64_t refused)> on_refused);
  // Connections closed because too many were in their handshake.
  uint64_t closed_over_cap() const { return guard_.closed_over_cap(); }

 private:
  ZapHandler(zmq::context_t& ctx, const ConnectionGuardOptions& guard) : ctx_(ctx), guard_(guard) {}
  uint64_t AnswerZap();
  uint64_t ReadMonitor();

  zmq::context_t& ctx_;
  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  std::string client_key_;  // 32 raw bytes
  ConnectionGuard guard_;
  LogLimiter log_limit_;
};

}  // namespace rtft::control
