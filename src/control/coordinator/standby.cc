// The standby's side of primary-backup replication (docs/control-protocol.md "Standby
// coordinator"): it applies the primary's changes to its copy and acknowledges each, records the
// agents' votes (they lost the primary), and takes over, one generation later, when it too lost
// the primary and a majority of the live agents voted: no minority cut off by a partition can
// make a second primary.
#include "control/coordinator/coordinator_impl.h"
#include "core/logging.h"

namespace rtft::control {

using std::chrono::milliseconds;

void CoordinatorImpl::OnRepl(const std::string& peer, const Message& msg) {
  const uint64_t seq = msg.body["seq"].get<uint64_t>();
  // The answer carries this coordinator's generation: an older primary learns from it that it
  // was replaced.
  auto fence_notice = [&] {
    loop_->SendNow(router_, peer, MsgType::kReplAck, ReplAckBody(seq), gen_);
  };
  if (role_ == Standing::kPrimary) {
    if (msg.gen < gen_) fence_notice();
    return;
  }
  if (role_ == Standing::kFenced) return;
  if (msg.gen < gen_) return fence_notice();
  auto c = ReplFrom(msg.body);
  if (!c.ok()) return Reject(c.status().message());
  if (c->op == ReplOp::kSyncBegin) {
    if (c->slots != table_.slots() || c->slot < 0 || c->slot >= table_.slots())
      return Reject("a copy of a " + std::to_string(c->slots) + "-slot job's state");
    ResetCopy();
    gen_ = msg.gen;
    primary_slot_ = c->slot;
    primary_peer_ = peer;
  } else if (peer != primary_peer_) {
    return Reject("repl from a primary this standby does not follow");
  }
  primary_heard_ = SteadyClock::now();
  if (c->op == ReplOp::kSyncEnd) {
    synced_ = true;
    if (c->epoch != table_.membership().epoch)
      RTFT_LOG(kWarn, kLogCtrl) << "standby: copy at epoch " << table_.membership().epoch
                                << ", the primary's at " << c->epoch;
    RTFT_LOG(kInfo, kLogCtrl) << "standby of slot " << primary_slot_ << " (generation " << gen_
                              << "): in sync at epoch " << table_.membership().epoch;
    Publish(table_.membership());
  } else if (c->op != ReplOp::kPing) {
    ApplyChange(*c);
    Publish(table_.membership());  // membership() shows the copy
  }
  loop_->SendNow(router_, peer, MsgType::kReplAck, ReplAckBody(seq), gen_);
}

void CoordinatorImpl::ResetCopy() {
  table_ = MembershipTable({options_.slots, options_.spares, options_.max_restarts_per_slot,
                            options_.on_spares_exhausted, options_.dedicated_slot ? 1 : 0,
                            options_.grid_tensor, options_.grid_pipeline});
  // The agents' connections to this coordinator stay; what the primary said goes.
  for (CoordinatorSlot& s : slots_) {
    s.joined = false;
    s.host.clear();
    s.endpoint.clear();
    s.applied_req.reset();
  }
  kv_ = KvStore();
  log_.clear();
  started_ = false;
  synced_ = false;
  latest_ = ControlEvent();
  latest_.membership = table_.membership();
  current_ = latest_;
}

void CoordinatorImpl::OnVote(const std::string& peer, const Message& msg) {
  const SlotId slot = msg.body["slot"].get<SlotId>();
  if (slot >= table_.slots() || !table_.has_agent(slot))
    return Reject("vote from slot " + std::to_string(slot));
  auto known = by_peer_.find(peer);
  if (known != by_peer_.end() && known->second != slot)
    return Reject("vote for slot " + std::to_string(slot) + " on slot " +
                  std::to_string(known->second) + "'s connection");
  if (known == by_peer_.end()) {
    if (!slots_[slot].peer.empty()) by_peer_.erase(slots_[slot].peer);
    by_peer_[peer] = slot;
    slots_[slot].peer = peer;
  }
  if (role_ == Standing::kPrimary) {
    // An agent that has not heard of the takeover yet: this event, of the new generation, tells
    // it.
    if (msg.gen < gen_ && !Partitioned(slot)) {
      SendCurrent(slot);
      SendCoordinators(slot);
    }
    return;
  }
  if (role_ == Standing::kStandby) slots_[slot].voted_at = SteadyClock::now();
}

int CoordinatorImpl::LiveMembers(const Membership& m) const {
  int n = 0;
  for (SlotId s = 0; s < table_.slots(); ++s)
    n += table_.has_agent(s) && RoleOfSlot(m, s) != Role::kRetired ? 1 : 0;
  return n;
}

void CoordinatorImpl::CheckTakeOver(SteadyClock::time_point now) {
  if (!synced_ || !started_ || table_.over()) return;
  if (now - primary_heard_ <= options_.heartbeat_timeout) return;
  int votes = 0;
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (!table_.has_agent(s) || table_.retired(s)) continue;
    if (now - slots_[s].voted_at <= options_.heartbeat_timeout) ++votes;
  }
  const int members = LiveMembers(table_.membership());
  if (2 * votes > members) return TakeOver(now, votes, members);
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed))
    RTFT_LOG(kInfo, kLogCtrl) << "standby: the primary (slot " << primary_slot_ << ") is silent, "
                              << votes << " of " << members
                              << " live agents lost it: no takeover without a majority";
}

void CoordinatorImpl::TakeOver(SteadyClock::time_point now, int votes, int members) {
  const SlotId old = primary_slot_;
  const auto silent = std::chrono::duration_cast<milliseconds>(now - primary_heard_).count();
  role_ = Standing::kPrimary;
  ++gen_;
  ++takeovers_;
  primary_slot_ = options_.self_slot;
  primary_peer_.clear();
  synced_ = false;
  RTFT_LOG(kWarn, kLogCtrl) << "slot " << options_.self_slot << " takes over from slot " << old
                            << " (generation " << gen_ << "): the primary was silent for " << silent
                            << " ms and " << votes << " of " << members << " live agents lost it";
  for (CoordinatorSlot& s : slots_) {
    s.last_seen = now;
    s.voted_at = {};
  }
  current_ = latest_;
  Publish(current_.membership);
  // The newest change decided: some agents may not have heard of it from the old primary.
  Broadcast(current_);
  SendCoordinators(-1);
  ReplChange lost(ReplOp::kFail);
  lost.failures = {{old, FailureKind::kSlotLost, 0}};
  const Decision d = ApplyChange(lost);
  Commit(lost, [this, d] { Apply(d, true); });
  AppointStandby();
}

}  // namespace rtft::control
