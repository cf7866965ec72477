// The coordinator's handlers of the agents' messages (docs/control-protocol.md); they run on the
// coordinator's event loop. A change they make is committed (replication.cc) before its answer
// goes out.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

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
  // Someone follows a newer primary: this one was replaced while it could not hear.
  if (role_ == Standing::kPrimary && msg.gen > gen_)
    return Fence(std::string(MsgTypeName(msg.type)) + " of generation " + std::to_string(msg.gen));
  if (msg.type == MsgType::kRepl) return OnRepl(peer, msg);
  if (msg.type == MsgType::kVote) return OnVote(peer, msg);
  if (role_ == Standing::kFenced) return;
  const json& b = msg.body;
  if (msg.type == MsgType::kHello) return OnHello(peer, b);
  if (role_ == Standing::kStandby) return;  // a standby decides nothing and answers nothing
  if (msg.type == MsgType::kKvPut || msg.type == MsgType::kKvGet || msg.type == MsgType::kGather ||
      msg.type == MsgType::kGatherResult) {
    auto it = by_peer_.find(peer);
    if (it == by_peer_.end())
      return Reject(std::string(MsgTypeName(msg.type)) + " from a peer without hello");
    if (Partitioned(it->second)) return;
    if (msg.type == MsgType::kGather) return OnGather(it->second, peer, b);
    if (msg.type == MsgType::kGatherResult) return OnGatherResult(it->second, peer, b);
    return msg.type == MsgType::kKvPut ? OnKvPut(peer, b) : OnKvGet(peer, b);
  }
  auto it = by_peer_.find(peer);
  if (it == by_peer_.end())
    return Reject(std::string(MsgTypeName(msg.type)) + " from a peer that did not say hello");
  const SlotId slot = it->second;
  if (!b.contains("slot") || b["slot"].get<SlotId>() != slot) {
    return Reject(std::string(MsgTypeName(msg.type)) + " from slot " + std::to_string(slot) +
                  " names another slot");
  }
  if (Partitioned(slot)) return;
  // An agent that still follows an older primary: tell it where the coordinators are now.
  if (msg.gen != 0 && msg.gen < gen_) SendCoordinators(slot);
  slots_[slot].last_seen = SteadyClock::now();
  DispatchSlot(slot, peer, msg);
}

void CoordinatorImpl::DispatchSlot(SlotId slot, const std::string& peer, const Message& msg) {
  switch (msg.type) {
    case MsgType::kHeartbeat:
      return OnHeartbeat(slot, peer, msg.body);
    case MsgType::kFailure:
    case MsgType::kExit:
      return OnRequest(slot, peer, msg);
    case MsgType::kSync:
      // A delta did not apply to what the agent holds: the whole membership, to it alone.
      if (started_) SendCurrent(slot);
      return;
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
  if (Partitioned(slot)) return;
  CoordinatorSlot& st = slots_[slot];
  if (!st.peer.empty() && st.peer != peer) {
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << slot << " said hello again from a new connection";
    by_peer_.erase(st.peer);
  }
  st.peer = peer;
  st.last_seen = SteadyClock::now();
  by_peer_[peer] = slot;
  // A standby only learns where each agent is: it takes over with these connections.
  if (role_ == Standing::kStandby) return;
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " joined from " << b["host"].get<std::string>()
                            << " (pid " << b["pid"].get<int32_t>() << ")";
  if (!st.joined && !started_) {
    ReplChange join(ReplOp::kJoin, slot);
    join.host = b["host"].get<std::string>();
    if (b.contains("ep")) join.endpoint = b["ep"].get<std::string>();
    if (b.contains("gpus")) {  // the codec checked both, and the device against the count
      join.device = b["dev"].get<int32_t>();
      join.gpus = b["gpus"].get<int32_t>();
    }
    ApplyChange(join);
    Commit(join, [] {});
  }
  if (started_ || table_.retired(slot)) {
    SendCurrent(slot);
    return SendCoordinators(slot);
  }
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (!slots_[s].joined && table_.has_agent(s)) return;
  }
  StartJob("every slot joined");
}

void CoordinatorImpl::OnHeartbeat(SlotId slot, const std::string& peer, const json& b) {
  CoordinatorSlot& st = slots_[slot];
  st.step = b["step"].get<uint64_t>();
  if (RoleOfSlot(current_.membership, slot) == Role::kRetired) {
    // A slot declared lost came back (e.g. its agent was stopped): remind it, once a second.
    const auto now = SteadyClock::now();
    if (now - st.last_retired_notice > std::chrono::seconds(1)) {
      st.last_retired_notice = now;
      SendCurrent(slot);
    }
    return;
  }
  // Acks only when asked (a few times per coordinator timeout): they are half the traffic.
  if (b.contains("ack") && b["ack"].get<bool>()) loop_->SendNow(router_, peer, heartbeat_ack_);
}

void CoordinatorImpl::OnRequest(SlotId slot, const std::string& peer, const Message& msg) {
  const json& b = msg.body;
  const uint64_t req = b["req"].get<uint64_t>();
  // Sent again after a takeover, and applied already (by the primary that was lost).
  const auto& applied = slots_[slot].applied_req;
  if (applied && req <= *applied) return Ack(peer, b, Status::Ok());
  ReplChange c(msg.type == MsgType::kExit ? ReplOp::kExit : ReplOp::kFail, slot);
  c.req = req;
  if (msg.type == MsgType::kExit) {
    c.exit_code = b["xcode"].get<int32_t>();
    RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << ": application exited with " << c.exit_code;
  } else {
    const auto kind = static_cast<FailureKind>(b["kind"].get<int>());
    RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " reports " << FailureKindName(kind)
                              << " (detail " << b["detail"].get<int32_t>() << ")";
    if (kind == FailureKind::kSlotLost) {
      Ack(peer, b, Status::InvalidArgument("an agent cannot report its own slot lost"));
      return Reject("an agent may not report its own slot lost");
    }
    c.failures = {{slot, kind, b["detail"].get<int32_t>()}};
  }
  const Decision d = ApplyChange(c);
  const bool ends_job = msg.type == MsgType::kExit && d.job_exit_code.has_value();
  Commit(
      c,
      [this, peer, b, d] {
        Apply(d, true);  // membership() shows the change before its requester hears of it
        Ack(peer, b, Status::Ok());
      },
      ends_job);
}

void CoordinatorImpl::OnKvPut(const std::string& peer, const json& b) {
  ReplChange c(ReplOp::kKv);
  c.key = b["key"].get<std::string>();
  c.value = BytesFrom(b["value"]);
  auto ready = kv_.Put(c.key, c.value);
  if (!ready.ok()) return Ack(peer, b, ready.status());
  Commit(c, [this, peer, b, waiters = std::move(*ready), value = c.value] {
    Ack(peer, b, Status::Ok());
    for (const auto& w : waiters) Send(w.peer, MsgType::kKvValue, KvValueBody(w.req, value));
  });
}

void CoordinatorImpl::OnKvGet(const std::string& peer, const json& b) {
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
  if (RoleOfSlot(current_.membership, slot) == Role::kRetired) {
    e.type = ControlEvent::Type::kShutdown;
    e.reason = "slot " + std::to_string(slot) + " was retired";
  }
  Send(slots_[slot].peer, MsgType::kEvent, EventBody(e));
}

void CoordinatorImpl::SendCoordinators(SlotId slot) {
  if (!options_.replicate) return;
  const bool synced = standby_ && standby_->synced;
  const json body = CoordinatorsBody(options_.self_slot, synced ? standby_->slot : -1,
                                     synced ? standby_->endpoint : "");
  for (SlotId s = slot < 0 ? 0 : slot; s < (slot < 0 ? table_.slots() : slot + 1); ++s) {
    if (!slots_[s].peer.empty()) Send(slots_[s].peer, MsgType::kCoordinators, body);
  }
}

bool CoordinatorImpl::Partitioned(SlotId slot) const {
  return role_ == Standing::kPrimary && partitioned_.count(slot) > 0;
}

void CoordinatorImpl::ReadPartition(SteadyClock::time_point now) {
  if (options_.partition_file.empty() || now - partition_read_ < milliseconds(100)) return;
  partition_read_ = now;
  std::set<SlotId> slots;
  // A regular file only, and its first 4 KiB: a FIFO or a directory there is no partition.
  std::string text;
  const int fd = ::open(options_.partition_file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) text.assign(buf, static_cast<size_t>(n));
  }
  if (fd >= 0) ::close(fd);
  for (char& ch : text)
    if (ch == ',') ch = ' ';
  std::istringstream words(text);
  for (SlotId s; words >> s;)
    if (s >= 0 && s < table_.slots()) slots.insert(s);
  if (slots == partitioned_) return;
  std::string list;
  for (SlotId s : slots) list += (list.empty() ? "" : ",") + std::to_string(s);
  RTFT_LOG(kWarn, kLogCtrl) << "test partition: dropping the traffic of slot(s) "
                            << (list.empty() ? "none" : list);
  partitioned_ = std::move(slots);
}

}  // namespace rtft::control
