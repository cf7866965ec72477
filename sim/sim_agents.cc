#include "sim/sim_agents.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "control/net/zmq_util.h"
#include "control/wire/codec.h"
#include "control/wire/messages.h"
#include "core/logging.h"

namespace rtft::bench {

using control::MsgType;

SocketEpoll::SocketEpoll() : fd_(::epoll_create1(EPOLL_CLOEXEC)) {}

SocketEpoll::~SocketEpoll() {
  if (fd_ >= 0) ::close(fd_);
}

void SocketEpoll::Add(zmq::socket_t& socket, uint64_t index) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = index;
  ::epoll_ctl(fd_, EPOLL_CTL_ADD, socket.get(zmq::sockopt::fd), &ev);
}

void SocketEpoll::Remove(zmq::socket_t& socket) {
  ::epoll_ctl(fd_, EPOLL_CTL_DEL, socket.get(zmq::sockopt::fd), nullptr);
}

const std::vector<uint64_t>& SocketEpoll::Wait(int timeout_ms) {
  epoll_event events[256];
  const int n = ::epoll_wait(fd_, events, 256, timeout_ms);
  ready_.clear();
  for (int i = 0; i < n; ++i) ready_.push_back(events[i].data.u64);
  return ready_;
}

SimAgents::SimAgents(const control::JobKeys& keys, const std::string& endpoint,
                     std::vector<control::SlotId> slots, std::chrono::milliseconds period)
    : ctx_(1), period_(period) {
  // Distinct from the coordinator's prefix, so its I/O thread's CPU can be told apart.
  ctx_.set(zmq::ctxopt::thread_name_prefix, 72);
  ctx_.set(zmq::ctxopt::max_sockets, static_cast<int>(slots.size()) + 16);
  const auto now = Clock::now();
  agents_.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    Agent a{slots[i], zmq::socket_t(ctx_, zmq::socket_type::dealer), {}, 0, false, false, {}};
    control::ConfigureSocket(a.socket);
    a.socket.set(zmq::sockopt::linger, 0);
    control::MakeCurveClient(a.socket, keys);
    a.socket.connect(endpoint);
    // Spread the heartbeats over the period, as independent agents would.
    a.next_beat = now + period * static_cast<int64_t>(i) / static_cast<int64_t>(slots.size());
    agents_.push_back(std::move(a));
  }
}

SimAgents::~SimAgents() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void SimAgents::Start() {
  for (auto& a : agents_)
    control::SendTo(a.socket, nullptr, MsgType::kHello, control::HelloBody({a.slot, "sim", 0}));
  thread_ = std::thread([this] { Run(); });
}

void SimAgents::Kill(control::SlotId slot) { kill_ = slot; }

int SimAgents::SawEpoch(uint64_t epoch, Clock::time_point* last) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  *last = Clock::time_point{};
  for (const auto& a : agents_) {
    if (a.dead) continue;
    for (const auto& [e, t] : a.epochs) {
      if (e != epoch) continue;
      ++n;
      if (t > *last) *last = t;
    }
  }
  return n;
}

size_t SimAgents::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& a : agents_) n += a.dead ? 0 : 1;
  return n;
}

void SimAgents::Receive(Agent& a) {
  while (a.socket.get(zmq::sockopt::events) & ZMQ_POLLIN) {
    auto frames = control::RecvFrames(a.socket);
    if (!frames) break;
    const zmq::message_t& m = frames->back();
    if (m.size() < control::kHeaderBytes) continue;
    const auto type = static_cast<MsgType>(static_cast<const uint8_t*>(m.data())[5]);
    // Heartbeat acks aside: the first event (the whole membership), then deltas.
    if (type != MsgType::kEvent && type != MsgType::kEventDelta) continue;
    const auto now = Clock::now();
    // Events are numbered by arrival (the first is the assignment of epoch 1; each failure in
    // the simulation makes exactly one epoch). Only the first agent of a driver decodes them
    // and checks the number: decoding N-entry membership lists for every agent on two threads
    // would measure the driver, not the coordinator's announcement.
    const uint64_t epoch = a.epochs.size() + 1;
    if (&a == &agents_.front()) {
      last_event_bytes_ = m.size();
      auto msg = control::DecodeMessage(m.data(), m.size());
      if (!msg.ok() || msg->body["epoch"].get<uint64_t>() != epoch) ++bad_events_;
    }
    if (!a.joined) {
      a.joined = true;
      ++joined_;
    }
    std::lock_guard<std::mutex> lock(mu_);
    a.epochs.emplace_back(epoch, now);
  }
}

void SimAgents::Run() {
  SocketEpoll epoll;
  if (!epoll.ok()) {
    RTFT_LOG(kError, kLogTool) << "simulated agents: epoll_create1: " << std::strerror(errno);
    return;
  }
  for (size_t i = 0; i < agents_.size(); ++i) epoll.Add(agents_[i].socket, i);
  auto next_scan = Clock::now();
  while (!stop_) {
    for (uint64_t i : epoll.Wait(1)) {
      Agent& a = agents_[i];
      if (!a.dead) Receive(a);
    }
    const int kill = kill_.exchange(-1);
    const auto now = Clock::now();
    if (now < next_scan && kill < 0) continue;
    next_scan = now + std::chrono::milliseconds(1);
    for (auto& a : agents_) {
      if (a.dead) continue;
      if (a.slot == kill) {
        epoll.Remove(a.socket);
        std::lock_guard<std::mutex> lock(mu_);
        a.dead = true;
        a.socket.close();
        continue;
      }
      if (now >= a.next_beat) {
        control::SendTo(
            a.socket, nullptr, MsgType::kHeartbeat,
            control::HeartbeatBody(a.slot, a.seq, a.seq, false, SampleOf(a.seq), WorkOf(a.seq)));
        ++a.seq;
        a.next_beat = NextBeat(a.next_beat, now, period_);
        // A send may consume the ZMQ_FD's signal of a message that arrived meanwhile.
        Receive(a);
      }
    }
  }
}

}  // namespace rtft::bench
