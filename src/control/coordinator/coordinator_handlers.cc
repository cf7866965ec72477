// The coordinator's handlers of incoming messages (docs/control-protocol.md); they run on the
// coordinator's thread.
#include "control/coordinator/coordinator_impl.h"
#include "core/logging.h"

namespace rtft::control {

using json = nlohmann::json;
using std::chrono::milliseconds;

void CoordinatorImpl::Reject(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.rejected_messages;
  }
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed)) {
    RTFT_LOG(kWarn, kLogCtrl) << "rejected message: " << why
                              << (suppressed ? " (" + std::to_string(suppressed) +
                                                   " more rejections not logged)"
                                             : std::string());
  }
}

void CoordinatorImpl::OnRejected(const std::string& peer, const std::string& why) {
  auto it = by_peer_.find(peer);
  Reject(why + (it != by_peer_.end() ? " (from slot " + std::to_string(it->second) + ")" : ""));
}

void CoordinatorImpl::Dispatch(const std::string& peer, const Message& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.messages;
    if (msg.type == MsgType::kHeartbeat) ++stats_.heartbeats;
  }
  const json& b = msg.body;
  if (msg.type == MsgType::kHello) return OnHello(peer, b);
  if (msg.type == MsgType::kKvPut) return OnKvPut(peer, b);
  if (msg.type == MsgType::kKvGet) return OnKvGet(peer, b);
  auto it = by_peer_.find(peer);
  if (it == by_peer_.end())
    return Reject(std::string(MsgTypeName(msg.type)) + " from a peer that did not say hello");
  const SlotId slot = it->second;
  if (!b.contains("slot") || b["slot"].get<SlotId>() != slot) {
    return Reject(std::string(MsgTypeName(msg.type)) + " from slot " + std::to_string(slot) +
                  " names another slot");
  }
  slots_[slot].last_seen = SteadyClock::now();
  switch (msg.type) {
    case MsgType::kHeartbeat:
      return OnHeartbeat(slot, peer, b);
    case MsgType::kFailure: {
      const auto kind = static_cast<FailureKind>(b["kind"].get<int>());
      RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " reports " << FailureKindName(kind)
                                << " (detail " << b["detail"].get<int32_t>() << ")";
      if (kind == FailureKind::kSlotLost) {
        Ack(peer, b, Status::InvalidArgument("an agent cannot report its own slot lost"));
        return Reject("an agent may not report its own slot lost");
      }
      Ack(peer, b, Status::Ok());
      return Apply(table_.Fail({{slot, kind, b["detail"].get<int32_t>()}}));
    }
    case MsgType::kExit: {
      const int32_t code = b["xcode"].get<int32_t>();
      RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << ": application exited with " << code;
      Ack(peer, b, Status::Ok());
      return Apply(table_.Exit(slot, code));
    }
    default:
      return Reject(std::string(MsgTypeName(msg.type)) + " is not a message for the coordinator");
  }
}

void CoordinatorImpl::OnHello(const std::string& peer, const json& b) {
  const SlotId slot = b["slot"].get<SlotId>();
  if (slot >= table_.slots())
    return Reject("hello from slot " + std::to_string(slot) + " of a " +
                  std::to_string(table_.slots()) + "-slot job");
  if (!table_.has_agent(slot))
    return Reject("hello from slot " + std::to_string(slot) + ", which runs only the coordinator");
  auto known = by_peer_.find(peer);
  if (known != by_peer_.end() && known->second != slot)
    return Reject("hello for slot " + std::to_string(slot) + " on slot " +
                  std::to_string(known->second) + "'s connection");
  CoordinatorSlot& st = slots_[slot];
  if (st.joined && st.peer != peer) {
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << slot << " said hello again from a new connection";
    by_peer_.erase(st.peer);
  }
  st.joined = true;
  st.peer = peer;
  st.host = b["host"].get<std::string>();
  st.last_seen = SteadyClock::now();
  by_peer_[peer] = slot;
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " joined from " << st.host << " (pid "
                            << b["pid"].get<int32_t>() << ")";
  if (started_ || table_.retired(slot)) return SendCurrent(slot);
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (!slots_[s].joined && table_.has_agent(s)) return;
  }
  StartJob("every slot joined");
}

void CoordinatorImpl::OnHeartbeat(SlotId slot, const std::string& peer, const json& b) {
  CoordinatorSlot& st = slots_[slot];
  st.step = b["step"].get<uint64_t>();
  if (table_.retired(slot)) {
    // A slot declared lost came back (e.g. its agent was stopped): remind it, once a second.
    const auto now = SteadyClock::now();
    if (now - st.last_retired_notice > std::chrono::seconds(1)) {
      st.last_retired_notice = now;
      SendCurrent(slot);
    }
    return;
  }
  // Acks only when asked (a few times per coordinator timeout): they are half the traffic.
  if (b.contains("ack") && b["ack"].get<bool>()) {
    loop_->SendNow(router_, peer, heartbeat_ack_);
  }
}

void CoordinatorImpl::OnKvPut(const std::string& peer, const json& b) {
  if (by_peer_.find(peer) == by_peer_.end()) return Reject("kv-put from a peer without hello");
  auto ready = kv_.Put(b["key"].get<std::string>(), BytesFrom(b["value"]));
  if (!ready.ok()) return Ack(peer, b, ready.status());
  Ack(peer, b, Status::Ok());
  const std::string value = BytesFrom(b["value"]);
  for (auto& w : *ready) Send(w.peer, MsgType::kKvValue, KvValueBody(w.req, value));
}

void CoordinatorImpl::OnKvGet(const std::string& peer, const json& b) {
  if (by_peer_.find(peer) == by_peer_.end()) return Reject("kv-get from a peer without hello");
  KvWaiter w{peer, b["req"].get<uint64_t>(), b["key"].get<std::string>(),
             SteadyClock::now() + milliseconds(b["tmo"].get<int64_t>())};
  auto got = kv_.Get(w);
  if (!got.ok()) {
    Send(peer, MsgType::kKvValue, KvValueBody(w.req, got.status()));
  } else if (got->has_value()) {
    Send(peer, MsgType::kKvValue, KvValueBody(w.req, **got));
  }
}

void CoordinatorImpl::Ack(const std::string& peer, const json& b, const Status& status) {
  Send(peer, MsgType::kAck, AckBody(b["req"].get<uint64_t>(), status));
}

void CoordinatorImpl::SendCurrent(SlotId slot) {
  ControlEvent e = current_;
  e.membership = table_.membership();
  if (table_.retired(slot)) {
    e.type = ControlEvent::Type::kShutdown;
    e.reason = "slot " + std::to_string(slot) + " was retired";
  }
  Send(slots_[slot].peer, MsgType::kEvent, EventBody(e));
}

}  // namespace rtft::control
