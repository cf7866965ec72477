// The primary's side of primary-backup replication (docs/control-protocol.md "Standby
// coordinator"): it appoints a standby in another slot, copies its state there, sends it every
// change before the change's answer goes out, replaces a standby that is lost, and steps down
// when it hears neither its standby nor half of the agents (a partition it is on the wrong
// side of, or a newer primary).
#include <algorithm>

#include "control/coordinator/coordinator_impl.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

}  // namespace

bool CoordinatorImpl::Replicating() const {
  // With two agents a primary that lost one could not tell a partition from a loss.
  int agents = 0;
  for (SlotId s = 0; s < table_.slots(); ++s) agents += table_.has_agent(s) ? 1 : 0;
  return options_.replicate && agents >= 3;
}

void CoordinatorImpl::Commit(const ReplChange& c, std::function<void()> out, bool ends_job) {
  if (role_ != Standing::kPrimary) return;  // a fenced primary says nothing any more
  uint64_t seq = 0;
  if (standby_) {
    seq = next_seq_++;
    loop_->SendNow(standby_->socket, "", MsgType::kRepl, ReplBody(seq, c), gen_);
  }
  held_.push_back({seq, std::move(out), c.op == ReplOp::kExit});
  // The last application exited: nothing is left for a standby to take over, and exits are what
  // the agents said, not this primary's judgement of who is alive. So when only exits wait for
  // the standby's acknowledgement they go out now, the job's end with them: a standby whose own
  // slot ended with its application would hold them forever, and this primary, soon hearing
  // neither it nor the agents that left, would step down without the job's exit code.
  if (ends_job && std::all_of(held_.begin(), held_.end(), [](const Held& h) { return h.exit; })) {
    while (!held_.empty() && role_ == Standing::kPrimary) {
      auto fn = std::move(held_.front().out);
      held_.pop_front();
      fn();
    }
    return;
  }
  Release();
}

void CoordinatorImpl::Release() {
  const auto now = SteadyClock::now();
  while (!held_.empty() && role_ == Standing::kPrimary) {
    const Held& h = held_.front();
    // A change the standby was sent is out once it acknowledged it. One made while there was no
    // standby is out once a standby holds a copy made after it, or at once while this primary
    // hears a majority of the agents (it cannot be on the wrong side of a partition then).
    const bool out = h.seq != 0 ? h.seq <= acked_seq_
                                : !Replicating() || !started_ || (standby_ && standby_->synced) ||
                                      MajorityHeard(now);
    if (!out) return;
    auto fn = std::move(held_.front().out);
    held_.pop_front();
    fn();
  }
}

bool CoordinatorImpl::MajorityHeard(SteadyClock::time_point now) const {
  int members = 0, heard = 0;
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (!table_.has_agent(s) || RoleOfSlot(current_.membership, s) == Role::kRetired) continue;
    ++members;
    if (slots_[s].joined && now - slots_[s].last_seen <= options_.heartbeat_timeout) ++heard;
  }
  // At least half, the primary's own slot included: a standby takes over only with votes from
  // more than half (standby.cc), so a side of a partition that holds half of the slots, the
  // primary with it, is the only one that decides. Two slots of four lost together, the
  // standby's among them, leave a job that goes on (docs/control-protocol.md).
  return 2 * heard >= members;
}

void CoordinatorImpl::AppointStandby() {
  if (!Replicating() || role_ != Standing::kPrimary || standby_ || table_.over()) return;
  const std::string& own_host = slots_[options_.self_slot].host;
  SlotId pick = -1;
  for (SlotId s = 0; s < table_.slots(); ++s) {
    const CoordinatorSlot& st = slots_[s];
    if (s == options_.self_slot || !st.joined || st.endpoint.empty() || bad_standbys_.count(s) ||
        Partitioned(s) || RoleOfSlot(current_.membership, s) == Role::kRetired)
      continue;
    // Another host first: a node lost takes both coordinators with it otherwise.
    if (pick < 0 || (slots_[pick].host == own_host && st.host != own_host)) pick = s;
  }
  if (pick < 0) return;
  StandbyLink link;
  link.slot = pick;
  link.endpoint = slots_[pick].endpoint;
  try {
    zmq::socket_t socket(ctx_, zmq::socket_type::dealer);
    ConfigureSocket(socket);
    MakeCurveClient(socket, options_.keys);
    socket.connect(link.endpoint);
    link.socket = loop_->AddSocket(std::move(socket), false, "standby link",
                                   [this](const std::string&, Message m) { OnStandbyMessage(m); });
  } catch (const zmq::error_t& e) {
    RTFT_LOG(kWarn, kLogCtrl) << "standby at " << link.endpoint << ": " << e.what();
    bad_standbys_.insert(pick);
    return;
  }
  const auto now = SteadyClock::now();
  link.last_heard = now;
  link.next_ping = now;
  standby_ = link;
  // The copy: the table's changes from the start, then the store's entries.
  ReplChange begin(ReplOp::kSyncBegin, options_.self_slot);
  begin.slots = table_.slots();
  auto send = [&](const ReplChange& c) {
    loop_->SendNow(standby_->socket, "", MsgType::kRepl, ReplBody(next_seq_++, c), gen_);
  };
  send(begin);
  for (const ReplChange& c : log_) send(c);
  for (const auto& [key, value] : kv_.values()) {
    ReplChange put(ReplOp::kKv);
    put.key = key;
    put.value = value;
    send(put);
  }
  ReplChange end(ReplOp::kSyncEnd);
  end.epoch = table_.membership().epoch;
  standby_->sync_end_seq = next_seq_;
  send(end);
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << pick << " (" << slots_[pick].host << ", " << link.endpoint
                            << ") becomes the standby: copying " << log_.size() << " changes and "
                            << kv_.size() << " keys";
}

void CoordinatorImpl::OnStandbyMessage(const Message& msg) {
  if (!standby_) return;
  if (msg.gen > gen_)
    return Fence("its standby (slot " + std::to_string(standby_->slot) + ") follows generation " +
                 std::to_string(msg.gen));
  if (msg.type != MsgType::kReplAck) return;
  standby_->last_heard = SteadyClock::now();
  acked_seq_ = std::max(acked_seq_, msg.body["seq"].get<uint64_t>());
  if (!standby_->synced && acked_seq_ >= standby_->sync_end_seq) {
    standby_->synced = true;
    RTFT_LOG(kInfo, kLogCtrl) << "standby slot " << standby_->slot << " in sync at epoch "
                              << table_.membership().epoch << " (generation " << gen_ << ")";
    Publish(current_.membership);
    SendCoordinators(-1);
  }
  Release();
}

void CoordinatorImpl::DropStandby(const std::string& why) {
  if (!standby_) return;
  RTFT_LOG(kWarn, kLogCtrl) << "standby slot " << standby_->slot << " dropped: " << why;
  loop_->RemoveSocket(standby_->socket);
  standby_.reset();
  // What it did not acknowledge waits for the next standby's copy, or for a majority.
  for (Held& h : held_) h.seq = 0;
  Publish(current_.membership);
  SendCoordinators(-1);
}

void CoordinatorImpl::CheckStandby(SteadyClock::time_point now) {
  if (!Replicating()) return Release();
  if (standby_ && RoleOfSlot(current_.membership, standby_->slot) == Role::kRetired)
    DropStandby("its slot was retired");
  if (!standby_) {
    AppointStandby();
    return Release();
  }
  if (now >= standby_->next_ping) {
    loop_->SendNow(standby_->socket, "", MsgType::kRepl,
                   ReplBody(next_seq_++, ReplChange(ReplOp::kPing)), gen_);
    standby_->next_ping =
        now +
        std::max(milliseconds(5), std::min(milliseconds(100), options_.heartbeat_timeout / 10));
  }
  if (now - standby_->last_heard <= options_.heartbeat_timeout) {
    alone_since_.reset();
    return Release();
  }
  if (MajorityHeard(now)) {
    bad_standbys_.insert(standby_->slot);
    DropStandby("silent for more than " + std::to_string(options_.heartbeat_timeout.count()) +
                " ms");
    AppointStandby();
    return Release();
  }
  // Neither the standby nor most agents: this primary may be cut off from the rest of the job,
  // which its standby then serves. It decides nothing (nothing is released) and steps down.
  if (!alone_since_) alone_since_ = now;
  if (now - *alone_since_ > options_.heartbeat_timeout)
    Fence("lost its standby (slot " + std::to_string(standby_->slot) +
          ") and a majority of the agents");
}

void CoordinatorImpl::Fence(const std::string& why) {
  if (role_ == Standing::kFenced) return;
  RTFT_LOG(kError, kLogCtrl) << "coordinator of slot " << options_.self_slot << " (generation "
                             << gen_ << ") steps down: " << why;
  role_ = Standing::kFenced;
  held_.clear();
  if (standby_) loop_->RemoveSocket(standby_->socket);
  standby_.reset();
  // Its agents stop hearing it at once and turn to the standby (or end).
  loop_->RemoveSocket(router_);
  Publish(current_.membership);
  std::lock_guard<std::mutex> lock(mu_);
  fenced_ = true;
  if (!job_code_) job_code_ = 1;
  cv_.notify_all();
}

}  // namespace rtft::control
