// The coordinator's state and each change of it: the same code for the primary that makes the
// change and the standby that receives it.
#include "control/coordinator/coordinator_state.h"

namespace rtft::control {
namespace {

TableOptions TableOptionsFrom(const CoordinatorOptions& o) {
  return {o.slots,
          o.spares,
          o.max_restarts_per_slot,
          o.on_spares_exhausted,
          o.dedicated_slot ? 1 : 0,
          o.grid_tensor,
          o.grid_pipeline};
}

}  // namespace

CoordinatorState::CoordinatorState(const CoordinatorOptions& o)
    : table_(TableOptionsFrom(o)), slots_(o.slots) {
  latest_.membership = table_.membership();
}

void CoordinatorState::Reset(const CoordinatorOptions& o) {
  table_ = MembershipTable(TableOptionsFrom(o));
  for (CoordinatorSlot& s : slots_) {
    s.joined = false;
    s.host.clear();
    s.endpoint.clear();
    s.applied_req.reset();
  }
  kv_ = KvStore();
  log_.clear();
  started_ = false;
  latest_ = ControlEvent();
  latest_.membership = table_.membership();
}

Decision CoordinatorState::Apply(const ReplChange& c) {
  Decision d;
  const bool known = c.slot >= 0 && c.slot < table_.slots();
  switch (c.op) {
    case ReplOp::kJoin:
      if (!known) break;
      slots_[c.slot].joined = true;
      slots_[c.slot].host = c.host;
      slots_[c.slot].endpoint = c.endpoint;
      table_.Join(c.slot, c.host, c.device, c.gpus);
      break;
    case ReplOp::kStart: {
      started_ = true;
      const auto now = SteadyClock::now();
      for (auto& s : slots_) s.last_seen = now;
      if (latest_.membership.epoch != table_.membership().epoch ||
          latest_.membership.slot_roles.empty()) {
        latest_.type = ControlEvent::Type::kEpochChange;
        latest_.membership = table_.membership();
        latest_.reason = "the job starts";
      } else {
        latest_.membership.devices = table_.membership().devices;  // told in the hellos
      }
      break;
    }
    case ReplOp::kFail:
      d = table_.Fail(c.failures);
      if (known && c.req) slots_[c.slot].applied_req = c.req;
      break;
    case ReplOp::kExit:
      if (!known) break;
      d = table_.Exit(c.slot, c.exit_code);
      if (c.req) slots_[c.slot].applied_req = c.req;
      break;
    case ReplOp::kKv:
      // The primary answers the waiters itself (PrimaryRole::OnKvPut); a standby has none.
      (void)kv_.Put(c.key, c.value);
      break;
    default:
      break;
  }
  if (d.event) latest_ = *d.event;
  if (InLog(c)) log_.push_back(c);
  return d;
}

SlotId CoordinatorState::SlotOf(const std::string& peer) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? -1 : it->second;
}

void CoordinatorState::Connect(SlotId slot, const std::string& peer) {
  CoordinatorSlot& st = slots_[slot];
  if (!st.peer.empty() && st.peer != peer) by_peer_.erase(st.peer);
  st.peer = peer;
  by_peer_[peer] = slot;
}

}  // namespace rtft::control
