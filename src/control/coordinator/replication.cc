// The primary's side of primary-backup replication (docs/control-protocol.md "Standby
// coordinator"): it appoints a standby in another slot, copies its state there, sends it every
// change before the change's answer goes out, replaces a standby that is lost, and steps down
// when it hears neither its standby nor half of the agents (a partition it is on the wrong
// side of, or a newer primary).
#include "control/coordinator/replication.h"

#include <algorithm>

#include "control/coordinator/coordinator_impl.h"
#include "control/coordinator/primary.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

}  // namespace

bool Replicator::Replicating() const {
  // With two agents a primary that lost one could not tell a partition from a loss.
  const MembershipTable& table = c_.state().table();
  int agents = 0;
  for (SlotId s = 0; s < table.slots(); ++s) agents += table.has_agent(s) ? 1 : 0;
  return c_.options().replicate && agents >= 3;
}

void Replicator::Commit(const ReplChange& c, std::function<void()> out, bool ends_job) {
  if (!c_.plays(&primary_)) return;  // a fenced primary says nothing any more
  uint64_t seq = 0;
  if (link_) {
    seq = next_seq_++;
    c_.loop().SendNow(link_->socket, "", MsgType::kRepl, ReplBody(seq, c), c_.gen());
  }
  held_.push_back({seq, std::move(out), c.op == ReplOp::kExit});
  // The last application exited: nothing is left for a standby to take over, and exits are what
  // the agents said, not this primary's judgement of who is alive. So when only exits wait for
  // the standby's acknowledgement they go out now, the job's end with them: a standby whose own
  // slot ended with its application would hold them forever, and this primary, soon hearing
  // neither it nor the agents that left, would step down without the job's exit code.
  if (ends_job && std::all_of(held_.begin(), held_.end(), [](const Held& h) { return h.exit; })) {
    while (!held_.empty() && c_.plays(&primary_)) {
      auto fn = std::move(held_.front().out);
      held_.pop_front();
      fn();
    }
    return;
  }
  Release();
}

void Replicator::Release() {
  const auto now = SteadyClock::now();
  while (!held_.empty() && c_.plays(&primary_)) {
    const Held& h = held_.front();
    // A change the standby was sent is out once it acknowledged it. One made while there was no
    // standby is out once a standby holds a copy made after it, or at once while this primary
    // hears a majority of the agents (it cannot be on the wrong side of a partition then).
    const bool out = h.seq != 0 ? h.seq <= acked_seq_
                                : !Replicating() || !c_.state().started() ||
                                      (link_ && link_->synced) || MajorityHeard(now);
    if (!out) return;
    auto fn = std::move(held_.front().out);
    held_.pop_front();
    fn();
  }
}

bool Replicator::MajorityHeard(SteadyClock::time_point now) const {
  const MembershipTable& table = c_.state().table();
  const auto& slots = c_.state().slots();
  int members = 0, heard = 0;
  for (SlotId s = 0; s < table.slots(); ++s) {
    if (!table.has_agent(s) || RoleOfSlot(primary_.current().membership, s) == Role::kRetired)
      continue;
    ++members;
    if (slots[s].joined && now - slots[s].last_seen <= c_.options().heartbeat_timeout) ++heard;
  }
  // At least half, the primary's own slot included: a standby takes over only with votes from
  // more than half (standby.cc), so a side of a partition that holds half of the slots, the
  // primary with it, is the only one that decides. Two slots of four lost together, the
  // standby's among them, leave a job that goes on (docs/control-protocol.md).
  return 2 * heard >= members;
}

void Replicator::AppointStandby() {
  CoordinatorState& state = c_.state();
  const CoordinatorOptions& options = c_.options();
  if (!Replicating() || !c_.plays(&primary_) || link_ || state.table().over()) return;
  const auto& slots = state.slots();
  const std::string& own_host = slots[options.self_slot].host;
  SlotId pick = -1;
  for (SlotId s = 0; s < state.table().slots(); ++s) {
    const CoordinatorSlot& st = slots[s];
    if (s == options.self_slot || !st.joined || st.endpoint.empty() || bad_standbys_.count(s) ||
        primary_.Partitioned(s) || RoleOfSlot(primary_.current().membership, s) == Role::kRetired)
      continue;
    // Another host first: a node lost takes both coordinators with it otherwise.
    if (pick < 0 || (slots[pick].host == own_host && st.host != own_host)) pick = s;
  }
  if (pick < 0) return;
  StandbyLink link;
  link.slot = pick;
  link.endpoint = slots[pick].endpoint;
  try {
    zmq::socket_t socket(c_.context(), zmq::socket_type::dealer);
    ConfigureSocket(socket);
    MakeCurveClient(socket, options.keys);
    socket.connect(link.endpoint);
    link.socket =
        c_.loop().AddSocket(std::move(socket), false, "standby link",
                            [this](const std::string&, Message m) { OnStandbyMessage(m); });
  } catch (const zmq::error_t& e) {
    RTFT_LOG(kWarn, kLogCtrl) << "standby at " << link.endpoint << ": " << e.what();
    bad_standbys_.insert(pick);
    return;
  }
  const auto now = SteadyClock::now();
  link.last_heard = now;
  link.next_ping = now;
  link_ = link;
  // The copy: the table's changes from the start, then the store's entries.
  ReplChange begin(ReplOp::kSyncBegin, options.self_slot);
  begin.slots = state.table().slots();
  auto send = [&](const ReplChange& c) {
    c_.loop().SendNow(link_->socket, "", MsgType::kRepl, ReplBody(next_seq_++, c), c_.gen());
  };
  send(begin);
  for (const ReplChange& c : state.log()) send(c);
  for (const auto& [key, value] : state.kv().values()) {
    ReplChange put(ReplOp::kKv);
    put.key = key;
    put.value = value;
    send(put);
  }
  ReplChange end(ReplOp::kSyncEnd);
  end.epoch = state.table().membership().epoch;
  link_->sync_end_seq = next_seq_;
  send(end);
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << pick << " (" << slots[pick].host << ", " << link.endpoint
                            << ") becomes the standby: copying " << state.log().size()
                            << " changes and " << state.kv().size() << " keys";
}

void Replicator::OnStandbyMessage(const Message& msg) {
  if (!link_) return;
  if (msg.gen > c_.gen())
    return primary_.Fence("its standby (slot " + std::to_string(link_->slot) +
                          ") follows generation " + std::to_string(msg.gen));
  if (msg.type != MsgType::kReplAck) return;
  link_->last_heard = SteadyClock::now();
  acked_seq_ = std::max(acked_seq_, msg.body["seq"].get<uint64_t>());
  if (!link_->synced && acked_seq_ >= link_->sync_end_seq) {
    link_->synced = true;
    RTFT_LOG(kInfo, kLogCtrl) << "standby slot " << link_->slot << " in sync at epoch "
                              << c_.state().table().membership().epoch << " (generation "
                              << c_.gen() << ")";
    c_.Publish(primary_.current().membership);
    primary_.SendCoordinators(-1);
  }
  Release();
}

void Replicator::DropStandby(const std::string& why) {
  if (!link_) return;
  RTFT_LOG(kWarn, kLogCtrl) << "standby slot " << link_->slot << " dropped: " << why;
  c_.loop().RemoveSocket(link_->socket);
  link_.reset();
  // What it did not acknowledge waits for the next standby's copy, or for a majority.
  for (Held& h : held_) h.seq = 0;
  c_.Publish(primary_.current().membership);
  primary_.SendCoordinators(-1);
}

bool Replicator::Check(SteadyClock::time_point now) {
  const std::chrono::milliseconds timeout = c_.options().heartbeat_timeout;
  if (!Replicating()) {
    Release();
    return true;
  }
  if (link_ && RoleOfSlot(primary_.current().membership, link_->slot) == Role::kRetired)
    DropStandby("its slot was retired");
  if (!link_) {
    AppointStandby();
    Release();
    return true;
  }
  if (now >= link_->next_ping) {
    c_.loop().SendNow(link_->socket, "", MsgType::kRepl,
                      ReplBody(next_seq_++, ReplChange(ReplOp::kPing)), c_.gen());
    link_->next_ping = now + std::max(milliseconds(5), std::min(milliseconds(100), timeout / 10));
  }
  if (now - link_->last_heard <= timeout) {
    alone_since_.reset();
    Release();
    return true;
  }
  if (MajorityHeard(now)) {
    bad_standbys_.insert(link_->slot);
    DropStandby("silent for more than " + std::to_string(timeout.count()) + " ms");
    AppointStandby();
    Release();
    return true;
  }
  // Neither the standby nor most agents: this primary may be cut off from the rest of the job,
  // which its standby then serves. It decides nothing (nothing is released) and steps down.
  if (!alone_since_) alone_since_ = now;
  if (now - *alone_since_ <= timeout) return true;
  primary_.Fence("lost its standby (slot " + std::to_string(link_->slot) +
                 ") and a majority of the agents");
  return false;
}

void Replicator::Resumed(SteadyClock::time_point now, SteadyClock::duration lost) {
  if (link_) link_->last_heard = MovedForward(link_->last_heard, now, lost);
  if (alone_since_) alone_since_ = MovedForward(*alone_since_, now, lost);
}

void Replicator::Stop() {
  held_.clear();
  if (link_) c_.loop().RemoveSocket(link_->socket);
  link_.reset();
}

}  // namespace rtft::control
