#include "control/socket_pump.h"

#include "control/messages.h"
#include "core/logging.h"
#include "core/thread.h"

namespace rtft::control {

SocketPump::SocketPump(zmq::context_t*, zmq::socket_t socket, bool router, Handler handler)
    : socket_(std::move(socket)), router_(router), handler_(std::move(handler)) {
  auto thread = Thread::Start("rtft-link", [this] {
    Status s = RunGuarded("the local link's thread", [this] { Run(); });
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    error_ = s;
  });
  if (thread.ok()) {
    thread_ = std::move(*thread);
  } else {
    error_ = thread.status();
  }
}

Status SocketPump::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

SocketPump::~SocketPump() {
  stop_ = true;
  waker_.Notify();
  thread_.Join();
  socket_.set(zmq::sockopt::linger, 0);
}

Status SocketPump::Send(const std::string& peer, MsgType type, const nlohmann::json& body) {
  auto bytes = EncodeMessage(type, body);
  if (!bytes.ok()) return bytes.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    outbox_.emplace_back(peer, std::move(*bytes));
  }
  waker_.Notify();
  return Status::Ok();
}

void SocketPump::Run() {
  while (!stop_) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, waker_.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(200));
    } catch (const zmq::error_t&) {
    }
    if (items[1].revents & ZMQ_POLLIN) waker_.Drain();
    std::deque<std::pair<std::string, std::string>> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out.swap(outbox_);
    }
    for (const auto& [peer, bytes] : out) SendRaw(socket_, router_ ? &peer : nullptr, bytes);
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    while (auto frames = RecvFrames(socket_)) {
      const size_t want = router_ ? 2 : 1;
      uint64_t suppressed = 0;
      if (frames->size() != want) {
        if (log_limit_.Allow(&suppressed))
          RTFT_LOG(kWarn, kLogCtrl)
              << "local link: rejected a " << frames->size() << "-part message";
        continue;
      }
      const zmq::message_t& payload = frames->back();
      auto msg = DecodeMessage(payload.data(), payload.size());
      if (!msg.ok()) {
        if (log_limit_.Allow(&suppressed))
          RTFT_LOG(kWarn, kLogCtrl) << "local link: rejected message: " << msg.status();
        continue;
      }
      handler_(router_ ? (*frames)[0].to_string() : std::string(), std::move(*msg));
    }
  }
}

}  // namespace rtft::control
