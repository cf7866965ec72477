#include "control/net/event_loop.h"

#include <cerrno>

#include "control/wire/messages.h"
#include "core/logging.h"

namespace rtft::control {

EventLoop::EventLoop(Options options) : options_(std::move(options)) {}

void EventLoop::Stop() {
  stop_ = true;
  waker_.Notify();
  thread_.Join();
}

EventLoop::~EventLoop() {
  Stop();
  for (auto& e : sockets_) {
    if (!e.open) continue;
    e.socket.set(zmq::sockopt::linger, 0);
    e.socket.close();
  }
}

EventLoop::SocketId EventLoop::AddSocket(zmq::socket_t socket, bool router, std::string name,
                                         Handler on_message, RejectHandler on_reject) {
  Entry& e = sockets_.emplace_back();
  e.socket = std::move(socket);
  e.router = router;
  e.name = std::move(name);
  e.on_message = std::move(on_message);
  e.on_reject = std::move(on_reject);
  return static_cast<SocketId>(sockets_.size() - 1);
}

void EventLoop::RemoveSocket(SocketId id) {
  Entry& e = sockets_.at(static_cast<size_t>(id));
  if (!e.open) return;
  e.open = false;
  e.socket.set(zmq::sockopt::linger, 0);
  e.socket.close();
}

void EventLoop::AddPoller(zmq::socket_t* socket, std::function<void()> on_readable) {
  pollers_.emplace_back(socket, std::move(on_readable));
}

void EventLoop::SetTimer(Timer timer) { timer_ = std::move(timer); }

zmq::socket_t& EventLoop::socket(SocketId id) {
  return sockets_.at(static_cast<size_t>(id)).socket;
}

Status EventLoop::Start() {
  RTFT_ASSIGN_OR_RETURN(thread_, Thread::Start(options_.thread_name, [this] {
                          Status s = RunGuarded(options_.what, [this] { Run(); });
                          if (s.ok()) return;
                          {
                            std::lock_guard<std::mutex> lock(mu_);
                            error_ = s;
                            outbox_.clear();
                          }
                          if (options_.on_error) {
                            // The owner's reaction must not escape either.
                            (void)RunGuarded(options_.what, [&] { options_.on_error(s); });
                          }
                        }));
  return Status::Ok();
}

Status EventLoop::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Status EventLoop::Post(SocketId id, const std::string& peer, std::string bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    outbox_.push_back({id, peer, std::move(bytes)});
  }
  waker_.Notify();
  return Status::Ok();
}

Status EventLoop::Post(SocketId id, const std::string& peer, MsgType type,
                       const nlohmann::json& body, Generation gen) {
  auto bytes = EncodeMessage(type, body, gen);
  if (!bytes.ok()) return bytes.status();
  return Post(id, peer, std::move(*bytes));
}

bool EventLoop::SendNow(SocketId id, const std::string& peer, const std::string& bytes) {
  Entry& e = sockets_.at(static_cast<size_t>(id));
  if (!e.open) return false;
  return SendRaw(e.socket, e.router ? &peer : nullptr, bytes);
}

bool EventLoop::SendNow(SocketId id, const std::string& peer, MsgType type,
                        const nlohmann::json& body, Generation gen) {
  Entry& e = sockets_.at(static_cast<size_t>(id));
  if (!e.open) return false;
  return SendTo(e.socket, e.router ? &peer : nullptr, type, body, gen);
}

bool EventLoop::open(SocketId id) const {
  return id >= 0 && static_cast<size_t>(id) < sockets_.size() && sockets_[id].open;
}

void EventLoop::Flush() {
  std::deque<Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(outbox_);
  }
  for (const Outgoing& o : out) SendNow(o.id, o.peer, o.bytes);
}

void EventLoop::Refuse(Entry& e, const std::string& peer, const std::string& why) {
  if (e.on_reject) return e.on_reject(peer, why);
  uint64_t suppressed = 0;
  if (!e.log_limit.Allow(&suppressed)) return;
  RTFT_LOG(kWarn, kLogCtrl) << e.name << ": rejected message: " << why
                            << (suppressed ? " (" + std::to_string(suppressed) +
                                                 " more rejections not logged)"
                                           : std::string());
}

void EventLoop::Receive(SocketId id) {
  Entry& e = sockets_[static_cast<size_t>(id)];
  const size_t want = e.router ? 2 : 1;
  // A handler may close this socket (RemoveSocket): `open` is checked every time.
  for (int i = 0; i < options_.batch && e.open; ++i) {
    auto frames = RecvFrames(e.socket);
    if (!frames) return;
    const std::string peer = e.router ? (*frames)[0].to_string() : std::string();
    if (frames->size() != want) {
      Refuse(e, peer,
             std::to_string(frames->size()) + " frames instead of " + std::to_string(want));
      continue;
    }
    const zmq::message_t& payload = frames->back();
    auto msg = DecodeMessage(payload.data(), payload.size());
    if (!msg.ok()) {
      Refuse(e, peer, msg.status().message());
      continue;
    }
    e.on_message(peer, std::move(*msg));
  }
}

void EventLoop::Run() {
  auto next_timer = SteadyClock::now();
  std::vector<zmq::pollitem_t> items;
  std::vector<SocketId> ids;
  while (!stop_) {
    if (options_.fault_point) options_.fault_point();
    items.clear();
    ids.clear();
    items.push_back({nullptr, waker_.fd(), ZMQ_POLLIN, 0});
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (!sockets_[i].open) continue;
      items.push_back({sockets_[i].socket.handle(), 0, ZMQ_POLLIN, 0});
      ids.push_back(static_cast<SocketId>(i));
    }
    for (auto& [socket, unused] : pollers_) items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
    const int64_t wait = timer_ ? MsUntil(next_timer, options_.max_wait.count())
                                : static_cast<int64_t>(options_.max_wait.count());
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR)
        RTFT_LOG(kDebug, kLogCtrl) << options_.thread_name << " poll: " << e.what();
    }
    if (items[0].revents & ZMQ_POLLIN) waker_.Drain();
    Flush();
    for (size_t k = 0; k < ids.size(); ++k)
      if (items[1 + k].revents & ZMQ_POLLIN) Receive(ids[k]);
    for (size_t k = 0; k < pollers_.size(); ++k)
      if (items[1 + ids.size() + k].revents & ZMQ_POLLIN) pollers_[k].second();
    const auto now = SteadyClock::now();
    if (timer_ && (now >= next_timer || force_timer_.exchange(false))) next_timer = timer_(now);
  }
}

}  // namespace rtft::control
