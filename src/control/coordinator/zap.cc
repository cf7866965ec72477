#include "control/coordinator/zap.h"

#include <cstring>

#include "control/net/zmq_util.h"
#include "core/logging.h"

namespace rtft::control {

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Create(zmq::context_t& ctx,
                                                         const std::string& client_public_z85,
                                                         const ConnectionGuardOptions& guard) {
  uint8_t raw[32];
  if (client_public_z85.size() != 40 || !zmq_z85_decode(raw, client_public_z85.c_str()))
    return Status::InvalidArgument("ZAP: the job's client key is not a Z85 CURVE key");
  std::unique_ptr<ZapHandler> z(new ZapHandler(ctx, guard));
  z->client_key_.assign(reinterpret_cast<const char*>(raw), sizeof(raw));
  try {
    z->zap_ = zmq::socket_t(ctx, zmq::socket_type::rep);
    z->zap_.set(zmq::sockopt::linger, 0);
    z->zap_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("ZAP handler: ") + e.what());
  }
  return z;
}

Status ZapHandler::Monitor(zmq::socket_t& socket) {
  const std::string addr =
      "inproc://rtft-coordinator-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  const int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (zmq_socket_monitor(socket.handle(), addr.c_str(), events) != 0)
    return Status::Internal(std::string("zmq_socket_monitor: ") + zmq_strerror(zmq_errno()));
  try {
    monitor_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    // libzmq drops monitor events it cannot queue: room for a flood of connections.
    monitor_.set(zmq::sockopt::rcvhwm, 100000);
    monitor_.connect(addr);
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("monitor socket: ") + e.what());
  }
  return Status::Ok();
}

void ZapHandler::Attach(EventLoop* loop, std::function<void(uint64_t)> on_refused) {
  loop->AddPoller(&zap_, [this, on_refused] { on_refused(AnswerZap()); });
  if (monitor_.handle())
    loop->AddPoller(&monitor_, [this, on_refused] { on_refused(ReadMonitor()); });
}

uint64_t ZapHandler::AnswerZap() {
  uint64_t refused = 0;
  while (auto frames = RecvFrames(zap_)) {
    // version, request id, domain, address, routing id, mechanism, credentials...
    auto part = [&](size_t i) { return i < frames->size() ? (*frames)[i].to_string() : ""; };
    const std::string mechanism = part(5);
    const bool admit =
        frames->size() == 7 && part(0) == "1.0" && mechanism == "CURVE" && part(6) == client_key_;
    uint64_t suppressed = 0;
    if (!admit) ++refused;
    if (!admit && log_limit_.Allow(&suppressed)) {
      char z85[41] = {};
      const std::string key = part(6);
      if (key.size() == 32) zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32);
      RTFT_LOG(kWarn, kLogCtrl) << "refused connection from " << part(3) << " (mechanism "
                                << (mechanism.empty() ? "?" : mechanism) << ", client key "
                                << (z85[0] ? z85 : "none") << "): not the job's key"
                                << (suppressed ? " (" + std::to_string(suppressed) +
                                                     " more refusals not logged)"
                                               : std::string());
    }
    try {
      zap_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      zap_.send(zmq::buffer(part(1)), zmq::send_flags::sndmore);
      zap_.send(admit ? zmq::str_buffer("200") : zmq::str_buffer("400"), zmq::send_flags::sndmore);
      zap_.send(admit ? zmq::str_buffer("OK") : zmq::str_buffer("unknown client key"),
                zmq::send_flags::sndmore);
      zap_.send(admit ? zmq::str_buffer("job") : zmq::str_buffer(""), zmq::send_flags::sndmore);
      zap_.send(zmq::str_buffer(""), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      RTFT_LOG(kError, kLogCtrl) << "ZAP reply: " << e.what();
    }
  }
  return refused;
}

uint64_t ZapHandler::ReadMonitor() {
  uint64_t refused = 0;
  while (auto frames = RecvFrames(monitor_)) {
    if (frames->size() != 2 || (*frames)[0].size() < 6) continue;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, (*frames)[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>((*frames)[0].data()) + 2, 4);
    // The second frame names this socket's own endpoint, not the peer: the guard finds the peer.
    refused += guard_.OnEvent(event, value, SteadyClock::now());
  }
  return refused;
}

}  // namespace rtft::control
