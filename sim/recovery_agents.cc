// The simulated agents of the recovery simulation (recovery_agents.h): their sockets, heartbeats,
// message dispatch and driver loop; the recovery sequence they walk is in recovery_sequence.cc.
#include "sim/recovery_agents.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "control/net/zmq_util.h"
#include "control/wire/codec.h"
#include "control/wire/delta.h"
#include "control/wire/gather.h"
#include "control/wire/messages.h"
#include "protect/plan.h"
#include "sim/sim_agents.h"

namespace rtft::bench {

using control::MsgType;
using json = nlohmann::json;

RecoveryAgents::RecoveryAgents(const control::JobKeys& keys, const std::string& endpoint,
                               std::vector<control::SlotId> slots, const RecoverySimConfig& config)
    : ctx_(1), config_(config) {
  ctx_.set(zmq::ctxopt::thread_name_prefix, 72);
  ctx_.set(zmq::ctxopt::max_sockets, static_cast<int>(slots.size()) + 16);
  const auto now = Clock::now();
  agents_.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    Agent a{
        slots[i], zmq::socket_t(ctx_, zmq::socket_type::dealer), {}, 0, 1, false, false, -1, 0, {},
        {}};
    control::ConfigureSocket(a.socket);
    a.socket.set(zmq::sockopt::linger, 0);
    control::MakeCurveClient(a.socket, keys);
    a.socket.connect(endpoint);
    a.next_beat = now + config.heartbeat_period * static_cast<int64_t>(i) /
                            static_cast<int64_t>(slots.size());
    agents_.push_back(std::move(a));
  }
}

RecoveryAgents::~RecoveryAgents() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RecoveryAgents::Start() {
  for (auto& a : agents_)
    control::SendTo(a.socket, nullptr, MsgType::kHello, control::HelloBody({a.slot, "sim", 0}));
  late_at_ = Clock::now().time_since_epoch().count();
  thread_ = std::thread([this] { Run(); });
}

void RecoveryAgents::ReportFailure(control::SlotId slot) { report_ = slot; }

std::string RecoveryAgents::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void RecoveryAgents::Error(const std::string& why) {
  ++errors_;
  if (first_error_.empty()) first_error_ = why;  // under mu_ (OnMessage holds it)
}

RecoveryAgents::EpochFigures RecoveryAgents::Figures(uint64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  EpochFigures f;
  for (const Agent& a : agents_) {
    auto it = a.epochs.find(epoch);
    if (a.dead || it == a.epochs.end() || it->second.rank < 0) continue;
    const PerEpoch& e = it->second;
    ++f.ranks;
    f.last_seen = std::max(f.last_seen, e.seen);
    if (e.is_done) {
      ++f.done;
      f.last_done = std::max(f.last_done, e.done);
    }
    // What it sent and received for every epoch up to this one since the first failure.
    uint64_t sent = 0, received = 0;
    for (const auto& [n, pe] : a.epochs) {
      if (n < 2 || n > epoch) continue;
      sent += pe.sent;
      received += pe.received;
    }
    f.bytes_sent += sent;
    f.bytes_received += received;
    f.max_sent = std::max(f.max_sent, sent);
    f.max_received = std::max(f.max_received, received);
    f.event_bytes = std::max(f.event_bytes, e.event_bytes);
  }
  return f;
}

uint64_t RecoveryAgents::Request(Agent& a, uint64_t epoch, int kind) {
  const uint64_t req = a.next_req++;
  a.asks[req] = {epoch, kind};
  return req;
}

void RecoveryAgents::Send(Agent& a, uint64_t epoch, uint8_t type, const json& body) {
  auto bytes = control::EncodeMessage(static_cast<MsgType>(type), body);
  if (!bytes.ok()) return Error("encoding: " + bytes.status().message());
  a.epochs[epoch].sent += bytes->size();
  control::SendRaw(a.socket, nullptr, *bytes);
}

void RecoveryAgents::OnMessage(Agent& a, const zmq::message_t& m, Clock::time_point now) {
  const auto type = static_cast<MsgType>(static_cast<const uint8_t*>(m.data())[5]);
  if (type == MsgType::kHeartbeatAck || type == MsgType::kCoordinators) return;
  auto msg = control::DecodeMessage(m.data(), m.size());
  if (!msg.ok()) return Error("decoding: " + msg.status().ToString());
  const json& b = msg->body;
  if (type == MsgType::kEvent || type == MsgType::kEventDelta) {
    const uint64_t epoch = b["epoch"].get<uint64_t>();
    if (epoch > membership_.epoch) {
      if (type == MsgType::kEvent) {
        membership_ = control::EventFrom(b, a.slot).membership;
      } else {
        auto e = control::EventFromDelta(b, membership_, a.slot);
        if (!e.ok()) {
          ++resyncs_;
          control::SendTo(a.socket, nullptr, MsgType::kSync,
                          control::SyncBody(a.slot, membership_.epoch));
          return;
        }
        membership_ = std::move(e->membership);
      }
      membership_hash_ = control::MembershipHash(membership_);
      rank_of_slot_.assign(membership_.slot_roles.size(), -1);
      for (size_t r = 0; r < membership_.rank_to_slot.size(); ++r)
        if (membership_.rank_to_slot[r] >= 0)
          rank_of_slot_[static_cast<size_t>(membership_.rank_to_slot[r])] = static_cast<int>(r);
    } else if (epoch == membership_.epoch && type == MsgType::kEventDelta &&
               b["hash"].get<uint64_t>() != membership_hash_) {
      return Error("two agents' deltas of epoch " + std::to_string(epoch) + " differ");
    }
    if (epoch == membership_.epoch) OnEpoch(a, epoch, m.size(), now);
    return;
  }
  if (type != MsgType::kGatherValue && type != MsgType::kAck && type != MsgType::kKvValue) return;
  auto it = a.asks.find(b["req"].get<uint64_t>());
  if (it == a.asks.end()) return;
  const Ask ask = it->second;
  a.asks.erase(it);
  PerEpoch& pe = a.epochs[ask.epoch];
  pe.received += m.size();
  if (ask.epoch != a.epoch || a.dead) {
    // An epoch that ended: the abort of its gather still counts, whether it came before or
    // after the next epoch's event.
    if (type == MsgType::kGatherValue && !a.dead) {
      auto reply = control::GatherReplyFrom(b);
      if (!reply.ok() && reply.status().code() == StatusCode::kAborted) ++aborted_;
    }
    return;
  }
  if (type == MsgType::kGatherValue) return OnGatherValue(a, ask, b, now);
  const Status s = control::StatusFrom(b);
  if (!s.ok()) {
    if (s.code() == StatusCode::kAborted) {
      ++aborted_;
      return;
    }
    return Error(std::string(type == MsgType::kAck ? "ack" : "kv") + ": " + s.ToString());
  }
  if (--pe.waiting == 0) NextRing(a, ask.epoch, now);
}

void RecoveryAgents::Drain(Agent& a, std::vector<Arrival>* inbox) {
  while (a.socket.get(zmq::sockopt::events) & ZMQ_POLLIN) {
    auto frames = control::RecvFrames(a.socket);
    if (!frames) break;
    if (frames->back().size() < control::kHeaderBytes) continue;
    inbox->push_back({&a, std::move(frames->back()), Clock::now()});
  }
}

void RecoveryAgents::Handle(std::vector<Arrival>* inbox) {
  if (inbox->empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Arrival& in : *inbox) OnMessage(*in.agent, in.message, in.at);
  inbox->clear();
}

void RecoveryAgents::Beat(Agent& a, Clock::time_point now) {
  control::SendTo(
      a.socket, nullptr, MsgType::kHeartbeat,
      control::HeartbeatBody(a.slot, a.seq, a.seq, false, SampleOf(a.seq), WorkOf(a.seq)));
  ++a.seq;
  // A beat sent late (the driver was busy) marks the driver unsteady; the next one stays on
  // this agent's own schedule, so that the agents' heartbeats stay spread over the period
  // instead of all falling due in one scan after a busy spell.
  if (now - a.next_beat > config_.heartbeat_period / 4) late_at_ = now.time_since_epoch().count();
  a.next_beat = NextBeat(a.next_beat, now, config_.heartbeat_period);
}

bool RecoveryAgents::steady() const {
  const auto late = Clock::time_point(Clock::duration(late_at_.load()));
  return joined_ == static_cast<int>(agents_.size()) &&
         Clock::now() - late > 2 * config_.heartbeat_period;
}

void RecoveryAgents::Run() {
  // Over a SocketEpoll (sim_agents.h). Every ready socket is read (and each message stamped)
  // before any is handled: 2048 agents share this thread, and one agent's answer to an event
  // (its state into the gather) must not delay the moment the next agent's copy of the event
  // counts as received.
  SocketEpoll epoll;
  if (!epoll.ok()) {
    const std::string why = std::string("epoll_create1: ") + std::strerror(errno);
    std::lock_guard<std::mutex> lock(mu_);
    Error(why);
    return;
  }
  for (size_t i = 0; i < agents_.size(); ++i) epoll.Add(agents_[i].socket, i);
  std::vector<Arrival> inbox;
  auto next_scan = Clock::now();
  while (!stop_) {
    // While a broadcast arrives, keep reading what became ready meanwhile (a bounded number of
    // rounds, so heartbeats stay on time), then handle it all.
    const std::vector<uint64_t>* ready = &epoll.Wait(1);
    for (int round = 0; !ready->empty() && round < 16; ++round) {
      for (uint64_t i : *ready) Drain(agents_[i], &inbox);
      ready = &epoll.Wait(0);
    }
    Handle(&inbox);
    const int report = report_.exchange(-1);
    const auto now = Clock::now();
    if (now < next_scan && report < 0) continue;
    next_scan = now + std::chrono::milliseconds(1);
    for (auto& a : agents_) {
      if (a.slot == report && !a.dead) {
        std::lock_guard<std::mutex> lock(mu_);
        const size_t s = static_cast<size_t>(a.slot);
        control::SendTo(
            a.socket, nullptr, MsgType::kFailure,
            control::FailureBody(a.next_req++, a.slot, control::FailureKind::kDeviceError,
                                 s < rank_of_slot_.size() ? rank_of_slot_[s] : -1, 0));
        a.dead = true;
      }
      if (a.dead || now < a.next_beat) continue;
      Beat(a, now);
      Drain(a, &inbox);  // a send may consume the ZMQ_FD's signal of a message that arrived
    }
    Handle(&inbox);
  }
}

}  // namespace rtft::bench
