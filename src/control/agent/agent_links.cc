// The agent client's side of its event loop: its links to the primary and, once the primary
// names one, to the standby; heartbeats; the primary's silence, the votes it makes the agent
// send to the standby, and the switch to the standby when a message of a newer generation comes
// from it (docs/control-protocol.md "Standby coordinator"). Messages of an older generation
// (a primary that was replaced) are dropped.
#include <algorithm>

#include "control/agent/agent_client_impl.h"
#include "control/wire/delta.h"
#include "core/logging.h"

namespace rtft::control {

using json = nlohmann::json;
using std::chrono::milliseconds;

StatusOr<AgentClientImpl::Link> AgentClientImpl::Connect(const std::string& endpoint, SlotId slot) {
  Link link;
  link.tag = next_tag_++;
  link.endpoint = endpoint;
  link.slot = slot;
  try {
    zmq::socket_t socket(ctx_, zmq::socket_type::dealer);
    ConfigureSocket(socket);
    MakeCurveClient(socket, options_.keys);
    socket.connect(endpoint);
    const int tag = link.tag;
    link.socket = loop_->AddSocket(
        std::move(socket), false, "coordinator connection",
        [this, tag](const std::string&, Message m) { OnMessage(tag, std::move(m)); },
        [this](const std::string&, const std::string& why) { OnReject(why); });
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("connecting to coordinator " + endpoint + ": " + e.what());
  }
  return link;
}

void AgentClientImpl::OnReject(const std::string& why) {
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed))
    RTFT_LOG(kWarn, kLogCtrl) << "rejected message from the coordinator: " << why;
}

void AgentClientImpl::OnMessage(int tag, Message msg) {
  if (msg.gen != 0 && msg.gen < gen_) {
    uint64_t suppressed = 0;
    if (log_limit_.Allow(&suppressed))
      RTFT_LOG(kInfo, kLogCtrl) << "dropped " << MsgTypeName(msg.type) << " of generation "
                                << msg.gen << ": this agent follows generation " << gen_;
    return;
  }
  if (tag == standby_.tag && tag >= 0) {
    // The standby speaks only once it has taken over.
    if (msg.gen <= gen_ || gen_ == 0) return;
    SwitchToStandby(msg.gen);
  } else if (tag != primary_.tag) {
    return;  // a link closed since
  }
  if (msg.gen > gen_) {
    gen_ = msg.gen;
    gen_seen_ = gen_;
  }
  last_heard_ = SteadyClock::now();
  if (suspect_) {
    suspect_ = false;
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << options_.me.slot << ": the primary (slot "
                              << primary_.slot << ") answers again";
  }
  Handle(std::move(msg));
}

void AgentClientImpl::Handle(Message msg) {
  switch (msg.type) {
    case MsgType::kEvent:
      return OnEvent(msg.body);
    case MsgType::kEventDelta:
      return OnEventDelta(msg.body);
    case MsgType::kAck:
    case MsgType::kKvValue:
    case MsgType::kGatherValue: {
      bool started = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const uint64_t req = msg.body["req"].get<uint64_t>();
        auto it = pending_.find(req);
        if (it == pending_.end()) return;
        it->second = std::move(msg.body);
        inflight_.erase(req);
        started = started_.count(req) > 0;
        cv_.notify_all();
      }
      if (started && options_.on_answer) options_.on_answer();
      return;
    }
    case MsgType::kCoordinators:
      return OnCoordinators(msg.body);
    case MsgType::kPause: {
      {
        std::lock_guard<std::mutex> lock(progress_mu_);
        pause_ = PauseFrom(msg.body);
      }
      if (options_.on_answer) options_.on_answer();  // the agent forwards it at once
      return;
    }
    case MsgType::kHeartbeatAck:
      return;
    default:
      RTFT_LOG(kWarn, kLogCtrl) << "unexpected " << MsgTypeName(msg.type)
                                << " from the coordinator";
  }
}

void AgentClientImpl::OnEvent(const json& body) {
  ControlEvent e = EventFrom(body, options_.me.slot);
  have_ = e.membership;
  Deliver(std::move(e));
}

void AgentClientImpl::OnEventDelta(const json& body) {
  auto e = have_ ? EventFromDelta(body, *have_, options_.me.slot)
                 : StatusOr<ControlEvent>(Status::FailedPrecondition("no membership yet"));
  if (!e.ok()) {
    // Missed an event, or the delta does not add up: ask for the whole membership.
    RTFT_LOG(kInfo, kLogCtrl) << "slot " << options_.me.slot << ": " << e.status().message()
                              << "; asking the coordinator for the whole membership";
    loop_->SendNow(primary_.socket, "", MsgType::kSync,
                   SyncBody(options_.me.slot, have_ ? have_->epoch : 0), gen_);
    return;
  }
  have_ = e->membership;
  Deliver(std::move(*e));
}

void AgentClientImpl::Deliver(ControlEvent e) {
  // After a takeover the new primary repeats the newest event: deliver each (epoch, kind) once.
  const std::pair<uint64_t, int> id{e.membership.epoch, static_cast<int>(e.type)};
  if (last_event_ && (id.first < last_event_->first || id == *last_event_)) return;
  last_event_ = id;
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_) {
    first_ = e.assignment;
    // A first event that already ends the job must still reach WaitEvent.
    if (e.type == ControlEvent::Type::kShutdown) events_.push_back(std::move(e));
  } else {
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void AgentClientImpl::OnCoordinators(const json& body) {
  primary_.slot = body["primary"].get<SlotId>();
  primary_slot_seen_ = primary_.slot;
  const SlotId standby = body["standby"].get<SlotId>();
  const std::string endpoint = body["sbep"].get<std::string>();
  if (standby < 0 || endpoint.empty()) {
    if (standby_.socket >= 0) loop_->RemoveSocket(standby_.socket);
    standby_ = Link();
    return;
  }
  if (standby_.socket >= 0 && standby_.endpoint == endpoint) {
    standby_.slot = standby;
    return;
  }
  ConnectStandby(endpoint, standby);
}

void AgentClientImpl::ConnectStandby(const std::string& endpoint, SlotId slot) {
  if (standby_.socket >= 0) loop_->RemoveSocket(standby_.socket);
  standby_ = Link();
  auto link = Connect(endpoint, slot);
  if (!link.ok()) {
    RTFT_LOG(kWarn, kLogCtrl) << "the standby (slot " << slot << "): " << link.status();
    return;
  }
  standby_ = *link;
  // The standby learns where this agent is; it answers nothing before it takes over.
  loop_->SendNow(standby_.socket, "", MsgType::kHello, HelloBody(options_.me), gen_);
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << options_.me.slot << ": standby coordinator at slot "
                            << slot << " (" << endpoint << ")";
}

void AgentClientImpl::SwitchToStandby(Generation gen) {
  RTFT_LOG(kWarn, kLogCtrl) << "slot " << options_.me.slot << ": the standby (slot "
                            << standby_.slot << ") took over from slot " << primary_.slot
                            << " (generation " << gen << ")";
  loop_->RemoveSocket(primary_.socket);
  primary_ = standby_;
  standby_ = Link();
  primary_slot_seen_ = primary_.slot;
  suspect_ = false;
  // What the old primary did not answer goes to the new one (it answers a change that it
  // already holds without applying it twice).
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [req, out] : inflight_) outbox_.push_back(out);
}

SteadyClock::time_point AgentClientImpl::OnTimer(SteadyClock::time_point now) {
  std::deque<Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(outbox_);
    if (!beating_ && hello_sent_) {
      beating_ = true;
      last_heard_ = now;
    }
  }
  for (const Outgoing& o : out) loop_->SendNow(primary_.socket, "", o.type, o.body, gen_);
  if (!beating_) return now + milliseconds(20);
  // A loop that did not run (the process stopped, or starved of CPU) does not blame the primary
  // for the silence it could not hear: the time past its heartbeat period counts for nothing, and
  // after half a primary timeout or more the primary is heard afresh.
  if (last_timer_ != SteadyClock::time_point{}) {
    const auto gap = now - last_timer_;
    if (gap > primary_timeout_ / 2)
      last_heard_ = std::max(last_heard_, now);
    else if (gap > 2 * options_.heartbeat_period)
      last_heard_ = MovedForward(last_heard_, now, gap - options_.heartbeat_period);
  }
  last_timer_ = now;
  Beat(now);
  CheckPrimary(now);
  SteadyClock::time_point next = next_beat_;
  if (suspect_ && standby_.socket >= 0) next = std::min(next, next_vote_);
  return next;
}

void AgentClientImpl::Beat(SteadyClock::time_point now) {
  if (now < next_beat_) return;
  // Ask for an ack four times per primary timeout: the primary's silence is noticed in time.
  const bool want_ack = now - last_ack_request_ >= primary_timeout_ / 4;
  if (want_ack) last_ack_request_ = now;
  CallProgress progress;
  StepWork work;
  std::optional<PauseNotice> paused;
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    if (progress_) {
      progress = *progress_;
      progress.age_ms = std::max<int64_t>(
          0, std::chrono::duration_cast<milliseconds>(now - progress_at_).count());
    }
    std::swap(work, work_);
    paused = paused_;
  }
  const SteadyClock::rep beat = SteadyClock::now().time_since_epoch().count();
  const SteadyClock::rep before = last_beat_.exchange(beat);  // stamped before the send
  if (before != 0 && beat - before > longest_gap_.load()) longest_gap_ = beat - before;
  loop_->SendNow(
      primary_.socket, "", MsgType::kHeartbeat,
      HeartbeatBody(options_.me.slot, step_.load(), seq_++, want_ack, progress, work, paused),
      gen_);
  next_beat_ = now + options_.heartbeat_period;
}

void AgentClientImpl::CheckPrimary(SteadyClock::time_point now) {
  const auto silent = std::chrono::duration_cast<milliseconds>(now - last_heard_);
  if (!suspect_ && silent > primary_timeout_ && standby_.socket >= 0) {
    suspect_ = true;
    next_vote_ = now;
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << options_.me.slot << ": the primary (slot "
                              << primary_.slot << ") silent for " << silent.count()
                              << " ms: voting for the standby (slot " << standby_.slot << ")";
  }
  if (suspect_ && standby_.socket >= 0 && now >= next_vote_) {
    const uint64_t epoch = last_event_ ? last_event_->first : 0;
    loop_->SendNow(standby_.socket, "", MsgType::kVote, VoteBody(options_.me.slot, epoch), gen_);
    next_vote_ = now + options_.heartbeat_period;
  }
  if (silent <= options_.coordinator_timeout) return;
  std::string why = "coordinator (slot " + std::to_string(primary_.slot) + ", " +
                    primary_.endpoint + ") silent for " +
                    std::to_string(options_.coordinator_timeout.count()) + " ms";
  if (standby_.socket >= 0)
    why += ", and its standby (slot " + std::to_string(standby_.slot) + ") did not take over";
  SetLost(Status::Unavailable(why + ": the job's coordinators are lost"));
}

void AgentClientImpl::SetLost(Status s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.ok()) return;
    lost_ = std::move(s);
    RTFT_LOG(kError, kLogCtrl) << lost_.message();
    cv_.notify_all();
  }
  if (options_.on_answer) options_.on_answer();
}

}  // namespace rtft::control
