// The standby's side of primary-backup replication (docs/control-protocol.md "Standby
// coordinator"): it applies the primary's changes to its copy and acknowledges each, records the
// agents' votes (they lost the primary), and takes over, one generation later, when it too lost
// the primary and a majority of the live agents voted: no minority cut off by a partition can
// make a second primary.
#include "control/coordinator/standby.h"

#include "core/logging.h"

namespace rtft::control {

using std::chrono::milliseconds;

StandbyRole::StandbyRole(CoordinatorImpl& c)
    : c_(c), state_(c.state()), voted_at_(static_cast<size_t>(c.options().slots)) {}

void StandbyRole::OnMessage(const std::string& peer, const Message& msg) {
  if (msg.type == MsgType::kRepl) return OnRepl(peer, msg);
  if (msg.type == MsgType::kVote) {
    const SlotId slot = c_.AcceptVote(peer, msg);
    if (slot >= 0) voted_at_[slot] = SteadyClock::now();
    return;
  }
  if (msg.type == MsgType::kHello) return OnHello(peer, msg.body);
  // A standby decides nothing and answers nothing.
}

void StandbyRole::OnHello(const std::string& peer, const nlohmann::json& b) {
  // A standby only learns where each agent is: it takes over with these connections.
  const SlotId slot = c_.CheckHello(peer, b);
  if (slot >= 0) c_.Greet(slot, peer);
}

void StandbyRole::OnRepl(const std::string& peer, const Message& msg) {
  const uint64_t seq = msg.body["seq"].get<uint64_t>();
  auto ack = [&] {
    c_.loop().SendNow(c_.router(), peer, MsgType::kReplAck, ReplAckBody(seq), c_.gen());
  };
  // The answer carries this coordinator's generation: an older primary learns from it that it
  // was replaced.
  if (msg.gen < c_.gen()) return ack();
  auto c = ReplFrom(msg.body);
  if (!c.ok()) return c_.Reject(c.status().message());
  const MembershipTable& table = state_.table();
  if (c->op == ReplOp::kSyncBegin) {
    if (c->slots != table.slots() || c->slot < 0 || c->slot >= table.slots())
      return c_.Reject("a copy of a " + std::to_string(c->slots) + "-slot job's state");
    // A new copy: what the primary said goes, the agents' connections stay.
    state_.Reset(c_.options());
    synced_ = false;
    c_.set_gen(msg.gen);
    primary_slot_ = c->slot;
    primary_peer_ = peer;
  } else if (peer != primary_peer_) {
    return c_.Reject("repl from a primary this standby does not follow");
  }
  primary_heard_ = SteadyClock::now();
  if (c->op == ReplOp::kSyncEnd) {
    synced_ = true;
    const uint64_t epoch = state_.table().membership().epoch;
    if (c->epoch != epoch)
      RTFT_LOG(kWarn, kLogCtrl) << "standby: copy at epoch " << epoch << ", the primary's at "
                                << c->epoch;
    RTFT_LOG(kInfo, kLogCtrl) << "standby of slot " << primary_slot_ << " (generation " << c_.gen()
                              << "): in sync at epoch " << epoch;
    c_.Publish(state_.table().membership());
  } else if (c->op != ReplOp::kPing) {
    state_.Apply(*c);
    c_.Publish(state_.table().membership());  // membership() shows the copy
  }
  ack();
}

void StandbyRole::Resumed(SteadyClock::time_point now, SteadyClock::duration lost) {
  primary_heard_ = MovedForward(primary_heard_, now, lost);
}

int StandbyRole::LiveMembers(const Membership& m) const {
  const MembershipTable& table = state_.table();
  int n = 0;
  for (SlotId s = 0; s < table.slots(); ++s)
    n += table.has_agent(s) && RoleOfSlot(m, s) != Role::kRetired ? 1 : 0;
  return n;
}

void StandbyRole::Tick(SteadyClock::time_point now) {
  const MembershipTable& table = state_.table();
  const auto timeout = c_.options().heartbeat_timeout;
  if (!synced_ || !state_.started() || table.over()) return;
  if (now - primary_heard_ <= timeout) return;
  int votes = 0;
  for (SlotId s = 0; s < table.slots(); ++s) {
    if (!table.has_agent(s) || table.retired(s)) continue;
    if (now - voted_at_[s] <= timeout) ++votes;
  }
  const int members = LiveMembers(table.membership());
  if (2 * votes > members) return TakeOver(now, votes, members);
  uint64_t suppressed = 0;
  if (c_.log_limit().Allow(&suppressed))
    RTFT_LOG(kInfo, kLogCtrl) << "standby: the primary (slot " << primary_slot_ << ") is silent, "
                              << votes << " of " << members
                              << " live agents lost it: no takeover without a majority";
}

void StandbyRole::TakeOver(SteadyClock::time_point now, int votes, int members) {
  const auto silent = std::chrono::duration_cast<milliseconds>(now - primary_heard_).count();
  // The coordinator replaces this role with a primary's: nothing here runs after it.
  c_.TakeOver(now, primary_slot_,
              "the primary was silent for " + std::to_string(silent) + " ms and " +
                  std::to_string(votes) + " of " + std::to_string(members) +
                  " live agents lost it");
}

}  // namespace rtft::control
