// The coordinator's decisions and their output: the liveness scan, each change of its state
// (the same code for the primary that makes it and the standby that receives it), the events it
// broadcasts and the job's end.
#include <time.h>

#include "control/coordinator/coordinator_impl.h"
#include "control/wire/delta.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void CoordinatorImpl::Tick(SteadyClock::time_point now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.thread_cpu_seconds = ThreadCpuSeconds();
  }
  if (role_ == Standing::kStandby) return CheckTakeOver(now);
  if (role_ == Standing::kFenced) return;
  ReadPartition(now);
  if (!started_) {
    if (now < join_deadline_) return;
    ReplChange missing(ReplOp::kFail);
    for (SlotId s = 0; s < table_.slots(); ++s) {
      if (!slots_[s].joined && table_.has_agent(s))
        missing.failures.push_back({s, FailureKind::kSlotLost, 0});
    }
    RTFT_LOG(kWarn, kLogCtrl) << missing.failures.size() << " slot(s) did not join within "
                              << options_.join_timeout.count() << " ms; treating them as lost";
    const Decision d = ApplyChange(missing);
    Commit(missing, [this, d] { Apply(d, false); });
    return StartJob("join timeout");
  }
  CheckStandby(now);
  if (role_ != Standing::kPrimary || table_.over()) return;
  ReplChange lost(ReplOp::kFail);
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (table_.retired(s) || !slots_[s].joined) continue;
    if (now - slots_[s].last_seen > options_.heartbeat_timeout) {
      RTFT_LOG(kWarn, kLogCtrl)
          << "slot " << s << " (" << slots_[s].host << "): no heartbeat for "
          << std::chrono::duration_cast<milliseconds>(now - slots_[s].last_seen).count() << " ms";
      lost.failures.push_back({s, FailureKind::kSlotLost, 0});
    }
  }
  if (lost.failures.empty()) return;
  const Decision d = ApplyChange(lost);
  Commit(lost, [this, d] { Apply(d, true); });
}

void CoordinatorImpl::Resumed(SteadyClock::time_point now, milliseconds gap) {
  // This coordinator did not run: the silence it saw is its own. It judges no agent, standby or
  // primary by it, and hears them again first (a primary replaced meanwhile learns so from its
  // standby's first answer, within a round trip).
  RTFT_LOG(kWarn, kLogCtrl) << "the coordinator's thread did not run for " << gap.count()
                            << " ms (stopped, or starved of CPU): liveness is judged afresh";
  for (CoordinatorSlot& s : slots_) s.last_seen = std::max(s.last_seen, now);
  if (standby_) standby_->last_heard = std::max(standby_->last_heard, now);
  alone_since_.reset();
  primary_heard_ = std::max(primary_heard_, now);
}

Decision CoordinatorImpl::ApplyChange(const ReplChange& c) {
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
      // The primary answers the waiters itself (OnKvPut); a standby has none.
      (void)kv_.Put(c.key, c.value);
      break;
    default:
      break;
  }
  if (d.event) latest_ = *d.event;
  if (InLog(c)) log_.push_back(c);
  return d;
}

void CoordinatorImpl::Apply(const Decision& d, bool broadcast) {
  if (d.event) {
    // membership() shows the new epoch before any agent can hear of it.
    Publish(d.event->membership);
    const auto declared = SteadyClock::now();
    RTFT_LOG(kWarn, kLogCtrl) << "epoch " << d.event->membership.epoch << ": "
                              << (d.event->type == ControlEvent::Type::kShutdown ? "shutdown: "
                                                                                 : "")
                              << d.event->reason;
    current_ = *d.event;
    // The gathers of the epochs before are over: their members start again in this one.
    EndGathersBefore(current_.membership.epoch);
    if (broadcast) Broadcast(*d.event);
    std::lock_guard<std::mutex> lock(mu_);
    if (d.event->membership.epoch != stats_.epoch) {
      stats_.epoch = d.event->membership.epoch;
      stats_.epoch_declared_at = declared;
      stats_.epoch_sent_at = SteadyClock::now();
    }
  }
  if (d.job_exit_code) FinishJob(*d.job_exit_code);
}

void CoordinatorImpl::FinishJob(int code) {
  RTFT_LOG(kInfo, kLogCtrl) << "job over, exit code " << code;
  std::lock_guard<std::mutex> lock(mu_);
  if (!job_code_) job_code_ = code;
  cv_.notify_all();
}

void CoordinatorImpl::StartJob(const std::string& why) {
  const ReplChange start(ReplOp::kStart);
  ApplyChange(start);
  Commit(start, [this, why] {
    current_ = latest_;
    RTFT_LOG(kInfo, kLogCtrl) << "job starts (" << why << "), epoch " << current_.membership.epoch;
    Broadcast(current_);
    AppointStandby();
  });
}

void CoordinatorImpl::Broadcast(const ControlEvent& event) {
  // What changed since the broadcast before (docs/control-protocol.md, "Event deltas"); the
  // first event, and the first after a takeover, carry the whole membership.
  auto bytes = sent_base_
                   ? EncodeMessage(MsgType::kEventDelta, EventDeltaBody(event, *sent_base_), gen_)
                   : EncodeMessage(MsgType::kEvent, EventBody(event), gen_);
  sent_base_ = event.membership;
  if (!bytes.ok()) {
    RTFT_LOG(kError, kLogCtrl) << "cannot encode the epoch " << event.membership.epoch
                               << " event: " << bytes.status();
    return;
  }
  // One buffer, shared by reference count among all the sends (only CURVE copies it).
  zmq::message_t shared(bytes->data(), bytes->size());
  zmq::socket_t& router = loop_->socket(router_);
  for (SlotId slot = 0; slot < table_.slots(); ++slot) {
    const CoordinatorSlot& s = slots_[slot];
    if (!s.joined || s.peer.empty() || Partitioned(slot)) continue;
    zmq::message_t m;
    m.copy(shared);
    try {
      if (router.send(zmq::buffer(s.peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        (void)router.send(m, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      RTFT_LOG(kDebug, kLogCtrl) << "event to a departed agent: " << e.what();
    }
  }
}

void CoordinatorImpl::Publish(const Membership& m) {
  auto ack = EncodeMessage(MsgType::kHeartbeatAck, json{{"epoch", m.epoch}}, gen_);
  if (ack.ok()) heartbeat_ack_ = std::move(*ack);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = m;
  stats_.primary = role_ == Standing::kPrimary;
  stats_.fenced = role_ == Standing::kFenced;
  stats_.generation = gen_;
  stats_.standby_slot = standby_ && standby_->synced ? standby_->slot : -1;
  stats_.synced = synced_;
  stats_.takeovers = takeovers_;
}

}  // namespace rtft::control
