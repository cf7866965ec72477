// The primary's handlers of the agents' messages (docs/control-protocol.md) and its gathers; they
// run on the coordinator's event loop. A change they make is committed (replication.cc) before
// its answer goes out. Gathers: contributions checked against the current epoch (its world size,
// the sender's rank), the answers sent, and every gather of an epoch that ended aborted, so that
// a recovery interrupted by a failure starts over in the next epoch instead of waiting for a
// member that is gone.
#include "control/coordinator/primary.h"
#include "core/logging.h"

namespace rtft::control {

using json = nlohmann::json;
using std::chrono::milliseconds;

void PrimaryRole::OnMessage(const std::string& peer, const Message& msg) {
  // Someone follows a newer primary: this one was replaced while it could not hear.
  if (msg.gen > c_.gen())
    return Fence(std::string(MsgTypeName(msg.type)) + " of generation " + std::to_string(msg.gen));
  if (msg.type == MsgType::kRepl) {
    // From an older primary: the answer, of this generation, tells it that it was replaced.
    if (msg.gen < c_.gen()) {
      const uint64_t seq = msg.body["seq"].get<uint64_t>();
      c_.loop().SendNow(c_.router(), peer, MsgType::kReplAck, ReplAckBody(seq), c_.gen());
    }
    return;
  }
  if (msg.type == MsgType::kVote) return OnVote(peer, msg);
  const json& b = msg.body;
  if (msg.type == MsgType::kHello) return OnHello(peer, b);
  if (msg.type == MsgType::kKvPut || msg.type == MsgType::kKvGet || msg.type == MsgType::kGather ||
      msg.type == MsgType::kGatherResult) {
    const SlotId slot = state_.SlotOf(peer);
    if (slot < 0)
      return c_.Reject(std::string(MsgTypeName(msg.type)) + " from a peer without hello");
    if (Partitioned(slot)) return;
    if (msg.type == MsgType::kGather) return OnGather(slot, peer, b);
    if (msg.type == MsgType::kGatherResult) return OnGatherResult(slot, peer, b);
    return msg.type == MsgType::kKvPut ? OnKvPut(peer, b) : OnKvGet(peer, b);
  }
  const SlotId slot = state_.SlotOf(peer);
  if (slot < 0)
    return c_.Reject(std::string(MsgTypeName(msg.type)) + " from a peer that did not say hello");
  if (!b.contains("slot") || b["slot"].get<SlotId>() != slot) {
    return c_.Reject(std::string(MsgTypeName(msg.type)) + " from slot " + std::to_string(slot) +
                     " names another slot");
  }
  if (Partitioned(slot)) return;
  // An agent that still follows an older primary: tell it where the coordinators are now.
  if (msg.gen != 0 && msg.gen < c_.gen()) SendCoordinators(slot);
  state_.slots()[slot].last_seen = SteadyClock::now();
  DispatchSlot(slot, peer, msg);
}

void PrimaryRole::DispatchSlot(SlotId slot, const std::string& peer, const Message& msg) {
  switch (msg.type) {
    case MsgType::kHeartbeat:
      return OnHeartbeat(slot, peer, msg.body);
    case MsgType::kFailure:
    case MsgType::kExit:
      return OnRequest(slot, peer, msg);
    case MsgType::kSync:
      // A delta did not apply to what the agent holds: the whole membership, to it alone.
      if (state_.started()) SendCurrent(slot);
      return;
    default:
      return c_.Reject(std::string(MsgTypeName(msg.type)) +
                       " is not a message for the coordinator");
  }
}

void PrimaryRole::OnHello(const std::string& peer, const json& b) {
  const SlotId slot = c_.CheckHello(peer, b);
  if (slot < 0 || Partitioned(slot)) return;
  c_.Greet(slot, peer);
  const CoordinatorSlot& st = state_.slots()[slot];
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " joined from " << b["host"].get<std::string>()
                            << " (pid " << b["pid"].get<int32_t>() << ")";
  if (!st.joined && !state_.started()) {
    ReplChange join(ReplOp::kJoin, slot);
    join.host = b["host"].get<std::string>();
    if (b.contains("ep")) join.endpoint = b["ep"].get<std::string>();
    if (b.contains("gpus")) {  // the codec checked both, and the device against the count
      join.device = b["dev"].get<int32_t>();
      join.gpus = b["gpus"].get<int32_t>();
    }
    state_.Apply(join);
    replicator_.Commit(join, [] {});
  }
  if (state_.started() || state_.table().retired(slot)) {
    SendCurrent(slot);
    return SendCoordinators(slot);
  }
  for (SlotId s = 0; s < state_.table().slots(); ++s) {
    if (!state_.slots()[s].joined && state_.table().has_agent(s)) return;
  }
  StartJob("every slot joined");
}

void PrimaryRole::OnVote(const std::string& peer, const Message& msg) {
  const SlotId slot = c_.AcceptVote(peer, msg);
  // An agent that has not heard of the takeover yet: this event, of the new generation, tells it.
  if (slot >= 0 && msg.gen < c_.gen() && !Partitioned(slot)) {
    SendCurrent(slot);
    SendCoordinators(slot);
  }
}

void PrimaryRole::OnHeartbeat(SlotId slot, const std::string& peer, const json& b) {
  CoordinatorSlot& st = state_.slots()[slot];
  st.step = b["step"].get<uint64_t>();
  st.paused = PausedFrom(b);
  if (RoleOfSlot(current_.membership, slot) == Role::kRetired) {
    // A slot declared lost came back (e.g. its agent was stopped): remind it, once a second.
    const auto now = SteadyClock::now();
    if (now - st.last_retired_notice > std::chrono::seconds(1)) {
      st.last_retired_notice = now;
      SendCurrent(slot);
    }
    return;
  }
  // A finished application's rank waits for nothing and is waited for by none.
  const LogicalRank rank = CurrentRankOf(slot);
  if (rank != kNoRank && !state_.table().exited(slot)) {
    hangs_.Observe(rank, st.step, CallProgressFrom(b), SteadyClock::now());
    stragglers_.Observe(rank, StepWorkFrom(b));
  }
  // Acks only when asked (a few times per coordinator timeout): they are half the traffic.
  if (b.contains("ack") && b["ack"].get<bool>())
    c_.loop().SendNow(c_.router(), peer, c_.heartbeat_ack());
}

void PrimaryRole::OnRequest(SlotId slot, const std::string& peer, const Message& msg) {
  const json& b = msg.body;
  const uint64_t req = b["req"].get<uint64_t>();
  // Sent again after a takeover, and applied already (by the primary that was lost).
  const auto& applied = state_.slots()[slot].applied_req;
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
    if (kind == FailureKind::kSlotLost || kind == FailureKind::kStraggler) {
      // The primary's own verdicts.
      const std::string what = std::string("an agent may not report its own ") +
                               (kind == FailureKind::kSlotLost ? "slot lost" : "rank a straggler");
      Ack(peer, b, Status::InvalidArgument(what));
      return c_.Reject(what);
    }
    c.failures = {{slot, kind, b["detail"].get<int32_t>()}};
  }
  const Decision d = state_.Apply(c);
  const bool ends_job = msg.type == MsgType::kExit && d.job_exit_code.has_value();
  replicator_.Commit(
      c,
      [this, peer, b, d] {
        Apply(d, true);  // membership() shows the change before its requester hears of it
        Ack(peer, b, Status::Ok());
      },
      ends_job);
}

void PrimaryRole::OnKvPut(const std::string& peer, const json& b) {
  ReplChange c(ReplOp::kKv);
  c.key = b["key"].get<std::string>();
  c.value = BytesFrom(b["value"]);
  auto ready = state_.kv().Put(c.key, c.value);
  if (!ready.ok()) return Ack(peer, b, ready.status());
  replicator_.Commit(c, [this, peer, b, waiters = std::move(*ready), value = c.value] {
    Ack(peer, b, Status::Ok());
    for (const auto& w : waiters) Send(w.peer, MsgType::kKvValue, KvValueBody(w.req, value));
  });
}

void PrimaryRole::OnKvGet(const std::string& peer, const json& b) {
  KvWaiter w{peer, b["req"].get<uint64_t>(), b["key"].get<std::string>(),
             SteadyClock::now() + milliseconds(b["tmo"].get<int64_t>())};
  auto got = state_.kv().Get(w);
  if (!got.ok()) {
    Send(peer, MsgType::kKvValue, KvValueBody(w.req, got.status()));
  } else if (got->has_value()) {
    Send(peer, MsgType::kKvValue, KvValueBody(w.req, **got));
  }
}

void PrimaryRole::Ack(const std::string& peer, const json& b, const Status& status) {
  Send(peer, MsgType::kAck, AckBody(b["req"].get<uint64_t>(), status));
}

LogicalRank PrimaryRole::CurrentRankOf(SlotId slot) {
  const Membership& m = current_.membership;
  if (rank_of_slot_epoch_ != m.epoch || rank_of_slot_.size() != m.slot_roles.size()) {
    rank_of_slot_.assign(m.slot_roles.size(), kNoRank);
    for (size_t r = 0; r < m.rank_to_slot.size(); ++r) {
      const SlotId s = m.rank_to_slot[r];
      if (s >= 0 && static_cast<size_t>(s) < rank_of_slot_.size())
        rank_of_slot_[s] = static_cast<LogicalRank>(r);
    }
    rank_of_slot_epoch_ = m.epoch;
  }
  if (slot < 0 || static_cast<size_t>(slot) >= rank_of_slot_.size()) return kNoRank;
  return rank_of_slot_[slot];
}

void PrimaryRole::OnGather(SlotId slot, const std::string& peer, const json& b) {
  const GatherRequest g = GatherFrom(b);
  const GatherPeer from{peer, b["req"].get<uint64_t>()};
  SendGatherAnswers(gathers_.Contribute(from, g, current_.membership.epoch,
                                        current_.membership.world_size, CurrentRankOf(slot),
                                        SteadyClock::now()));
}

void PrimaryRole::OnGatherResult(SlotId slot, const std::string& peer, const json& b) {
  std::vector<GatherAnswer> answers;
  const Status s = gathers_.Result(b["key"].get<std::string>(), b["epoch"].get<uint64_t>(),
                                   current_.membership.epoch, CurrentRankOf(slot),
                                   BytesFrom(b["value"]), &answers);
  Ack(peer, b, s);
  SendGatherAnswers(answers);
}

void PrimaryRole::SendGatherAnswers(const std::vector<GatherAnswer>& answers) {
  for (const GatherAnswer& a : answers) {
    if (!Send(a.to.peer, MsgType::kGatherValue,
              GatherValueBody(a.to.req, a.status, a.values.get(), a.result)))
      RTFT_LOG(kDebug, kLogCtrl) << "a gather answer to a departed agent";
  }
}

void PrimaryRole::EndGathersBefore(uint64_t epoch) {
  SendGatherAnswers(gathers_.AbortBefore(epoch));
}

}  // namespace rtft::control
