#include "control/net/zmq_util.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "core/logging.h"

namespace rtft::control {

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, kLingerMs);
  // zmq drops a peer that sends more than this; the codec logs anything between its own limit
  // and this one.
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(2 * kMaxMessageBytes));
  socket.set(zmq::sockopt::sndhwm, 100000);
  socket.set(zmq::sockopt::rcvhwm, 100000);
}

void MakeCurveServer(zmq::socket_t& socket, const JobKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.server_secret);
  // A domain makes libzmq consult the ZAP handler for every connection.
  socket.set(zmq::sockopt::zap_domain, "rtft");
}

void MakeCurveClient(zmq::socket_t& socket, const JobKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
  socket.set(zmq::sockopt::curve_publickey, keys.client_public);
  socket.set(zmq::sockopt::curve_secretkey, keys.client_secret);
}

bool SendRaw(zmq::socket_t& socket, const std::string* routing_id, const std::string& bytes) {
  try {
    if (routing_id) {
      if (!socket.send(zmq::buffer(*routing_id),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return false;
    }
    return socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH and the like: the peer is gone; heartbeats will tell.
    RTFT_LOG(kDebug, kLogCtrl) << "send failed: " << e.what();
    return false;
  }
}

bool SendTo(zmq::socket_t& socket, const std::string* routing_id, MsgType type,
            const nlohmann::json& body, Generation gen) {
  auto bytes = EncodeMessage(type, body, gen);
  if (!bytes.ok()) {
    RTFT_LOG(kError, kLogCtrl) << "not sending " << MsgTypeName(type) << ": " << bytes.status();
    return false;
  }
  return SendRaw(socket, routing_id, *bytes);
}

std::optional<std::vector<zmq::message_t>> RecvFrames(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  try {
    bool more = true;
    while (more) {
      zmq::message_t m;
      if (!socket.recv(m, zmq::recv_flags::dontwait)) {
        if (frames.empty()) return std::nullopt;
        break;  // cannot happen: the parts of a message arrive together
      }
      more = m.more();
      // Keep at most 16 parts; the caller rejects such a message anyway.
      if (frames.size() < 16) frames.push_back(std::move(m));
    }
  } catch (const zmq::error_t& e) {
    RTFT_LOG(kDebug, kLogCtrl) << "recv failed: " << e.what();
    if (frames.empty()) return std::nullopt;
  }
  return frames;
}

Waker::Waker() { fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
Waker::~Waker() {
  if (fd_ >= 0) ::close(fd_);
}
void Waker::Notify() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
}
void Waker::Drain() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(fd_, &v, sizeof(v));
}

bool LogLimiter::Allow(uint64_t* suppressed) {
  const auto now = SteadyClock::now();
  if (now - window_ > std::chrono::seconds(1)) {
    window_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    ++dropped_;
    return false;
  }
  ++in_window_;
  *suppressed = dropped_;
  dropped_ = 0;
  return true;
}

int64_t MsUntil(SteadyClock::time_point deadline, int64_t cap) {
  const auto now = SteadyClock::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
  return ms < cap ? ms : cap;
}

}  // namespace rtft::control
