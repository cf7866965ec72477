#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "control/coordinator/coordinator_impl.h"
#include "core/logging.h"
#include "core/thread.h"

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

Status CoordinatorImpl::Init() {
  EventLoop::Options lo;
  lo.thread_name = "rtft-coord";
  lo.what = "the coordinator's thread";
  lo.fault_point = options_.fault_point;
  // No decision can be taken any more: the job ends (exit code 1), and says why.
  lo.on_error = [this](const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = s;
    if (!job_code_) job_code_ = 1;
    cv_.notify_all();
  };
  loop_ = std::make_unique<EventLoop>(std::move(lo));
  try {
    ctx_.set(zmq::ctxopt::thread_name_prefix, kCoordinatorZmqThreadPrefix);
    ctx_.set(zmq::ctxopt::max_sockets, 64);
    // The ZAP handler must be bound before the first connection arrives.
    ConnectionGuardOptions guard;
    guard.handshake_window = options_.handshake_timeout;
    guard.max_pending = options_.max_pending_connections > 0
                            ? static_cast<size_t>(options_.max_pending_connections)
                            : PendingConnectionBudget(options_.slots, kDescriptorReserve);
    RTFT_ASSIGN_OR_RETURN(zap_, ZapHandler::Create(ctx_, options_.keys.client_public, guard));
    zmq::socket_t router(ctx_, zmq::socket_type::router);
    ConfigureSocket(router);
    MakeCurveServer(router, options_.keys);
    router.set(zmq::sockopt::handshake_ivl, static_cast<int>(options_.handshake_timeout.count()));
    // Every agent connects at about the same moment; a short listen queue drops SYNs and
    // costs each dropped agent a TCP retransmission timeout (1 s, 3 s, ...).
    router.set(zmq::sockopt::backlog, std::max(128, std::min(options_.slots + 64, 65535)));
    RTFT_RETURN_IF_ERROR(zap_->Monitor(router));
    const std::string host = options_.bind_host.empty() ? "*" : options_.bind_host;
    router.bind("tcp://" + host + ":0");
    std::string bound = router.get(zmq::sockopt::last_endpoint);
    const std::string port = bound.substr(bound.rfind(':') + 1);
    std::string advertise = options_.advertise_host;
    if (advertise.empty() && host != "*" && host != "0.0.0.0") advertise = host;
    if (advertise.empty()) {
      char name[256] = {};
      ::gethostname(name, sizeof(name) - 1);
      advertise = name;
    }
    endpoint_ = "tcp://" + advertise + ":" + port;
    router_ = loop_->AddSocket(
        std::move(router), true, "coordinator",
        [this](const std::string& peer, Message m) { Dispatch(peer, m); },
        [this](const std::string& peer, const std::string& why) { OnRejected(peer, why); });
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("coordinator sockets: ") + e.what());
  }
  zap_->Attach(loop_.get(), [this](uint64_t refused) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.rejected_peers += refused;
    stats_.closed_connections = zap_->closed_over_cap();
  });
  snapshot_ = table_.membership();
  stats_.epoch = snapshot_.epoch;
  stats_.epoch_declared_at = stats_.epoch_sent_at = SteadyClock::now();
  join_deadline_ = SteadyClock::now() + options_.join_timeout;
  tick_ = milliseconds(
      std::max<int64_t>(2, std::min<int64_t>(100, options_.heartbeat_timeout.count() / 20)));
  Publish();
  loop_->SetTimer([this](SteadyClock::time_point now) { return OnTimer(now); });
  RTFT_RETURN_IF_ERROR(loop_->Start());
  RTFT_LOG(kInfo, kLogCtrl) << "coordinator at " << endpoint_ << ": " << options_.slots
                            << " slots, " << options_.spares << " spares, heartbeat timeout "
                            << options_.heartbeat_timeout.count() << " ms, on spares exhausted "
                            << PolicyName(options_.on_spares_exhausted);
  return Status::Ok();
}

SteadyClock::time_point CoordinatorImpl::OnTimer(SteadyClock::time_point now) {
  if (now >= next_tick_) {
    Tick(now);
    next_tick_ = now + tick_;
  }
  for (const auto& w : kv_.Expire(now)) {
    Send(w.peer, MsgType::kKvValue,
         KvValueBody(w.req, Status::DeadlineExceeded("KV key '" + w.key + "' not put in time")));
  }
  SteadyClock::time_point next = next_tick_;
  if (auto d = kv_.NextDeadline()) next = std::min(next, *d);
  return next;
}

bool CoordinatorImpl::Send(const std::string& peer, MsgType type, const json& body) {
  return loop_->SendNow(router_, peer, type, body);
}

void CoordinatorImpl::Tick(SteadyClock::time_point now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.thread_cpu_seconds = ThreadCpuSeconds();
  }
  if (!started_) {
    if (now < join_deadline_) return;
    std::vector<SlotFailure> missing;
    for (SlotId s = 0; s < table_.slots(); ++s) {
      if (!slots_[s].joined && table_.has_agent(s))
        missing.push_back({s, FailureKind::kSlotLost, 0});
    }
    RTFT_LOG(kWarn, kLogCtrl) << missing.size() << " slot(s) did not join within "
                              << options_.join_timeout.count() << " ms; treating them as lost";
    Apply(table_.Fail(missing));
    StartJob("join timeout");
    return;
  }
  if (table_.over()) return;
  std::vector<SlotFailure> lost;
  for (SlotId s = 0; s < table_.slots(); ++s) {
    if (table_.retired(s) || !slots_[s].joined) continue;
    if (now - slots_[s].last_seen > options_.heartbeat_timeout) {
      RTFT_LOG(kWarn, kLogCtrl)
          << "slot " << s << " (" << slots_[s].host << "): no heartbeat for "
          << std::chrono::duration_cast<milliseconds>(now - slots_[s].last_seen).count() << " ms";
      lost.push_back({s, FailureKind::kSlotLost, 0});
    }
  }
  if (!lost.empty()) Apply(table_.Fail(lost));
}

void CoordinatorImpl::Apply(const Decision& d) {
  // membership() shows the new epoch before any agent can hear of it.
  Publish();
  if (d.event) {
    const auto declared = SteadyClock::now();
    RTFT_LOG(kWarn, kLogCtrl) << "epoch " << d.event->membership.epoch << ": "
                              << (d.event->type == ControlEvent::Type::kShutdown ? "shutdown: "
                                                                                 : "")
                              << d.event->reason;
    current_ = *d.event;
    if (started_) Broadcast(*d.event);
    std::lock_guard<std::mutex> lock(mu_);
    if (d.event->membership.epoch != stats_.epoch) {
      stats_.epoch = d.event->membership.epoch;
      stats_.epoch_declared_at = declared;
      stats_.epoch_sent_at = SteadyClock::now();
    }
  }
  if (d.job_exit_code) {
    RTFT_LOG(kInfo, kLogCtrl) << "job over, exit code " << *d.job_exit_code;
    std::lock_guard<std::mutex> lock(mu_);
    job_code_ = *d.job_exit_code;
    cv_.notify_all();
  }
}

void CoordinatorImpl::StartJob(const std::string& why) {
  started_ = true;
  const auto now = SteadyClock::now();
  for (auto& s : slots_) s.last_seen = now;
  if (current_.membership.epoch != table_.membership().epoch ||
      current_.membership.slot_roles.empty()) {
    current_.type = ControlEvent::Type::kEpochChange;
    current_.membership = table_.membership();
    current_.reason = why;
  }
  RTFT_LOG(kInfo, kLogCtrl) << "job starts (" << why << "), epoch " << current_.membership.epoch;
  Broadcast(current_);
}

void CoordinatorImpl::Broadcast(const ControlEvent& event) {
  auto bytes = EncodeMessage(MsgType::kEvent, EventBody(event));
  if (!bytes.ok()) {
    RTFT_LOG(kError, kLogCtrl) << "cannot encode the epoch " << event.membership.epoch
                               << " event: " << bytes.status();
    return;
  }
  // One buffer, shared by reference count among all the sends (only CURVE copies it).
  zmq::message_t shared(bytes->data(), bytes->size());
  for (auto& s : slots_) {
    if (!s.joined) continue;
    zmq::message_t m;
    m.copy(shared);
    try {
      zmq::socket_t& router = loop_->socket(router_);
      if (router.send(zmq::buffer(s.peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        (void)router.send(m, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      RTFT_LOG(kDebug, kLogCtrl) << "event to a departed agent: " << e.what();
    }
  }
}

void CoordinatorImpl::Publish() {
  auto ack = EncodeMessage(MsgType::kHeartbeatAck, json{{"epoch", table_.membership().epoch}});
  if (ack.ok()) heartbeat_ack_ = std::move(*ack);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = table_.membership();
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  if (options.slots < 1 || options.slots > kMaxSlots)
    return Status::InvalidArgument("coordinator: slots must be in [1, " +
                                   std::to_string(kMaxSlots) + "]");
  const int32_t agents = options.slots - (options.dedicated_slot ? 1 : 0);
  if (options.spares < 0 || options.spares >= agents)
    return Status::InvalidArgument(
        "coordinator: spares must be in [0, slots - 1]" +
        std::string(options.dedicated_slot ? " (slot 0 runs only the coordinator)" : ""));
  if (options.max_restarts_per_slot < 0)
    return Status::InvalidArgument("coordinator: max_restarts_per_slot must be >= 0");
  if (options.heartbeat_timeout.count() <= 0 || options.join_timeout.count() <= 0 ||
      options.handshake_timeout.count() <= 0 || options.handshake_timeout.count() > 600000)
    return Status::InvalidArgument("coordinator: timeouts must be positive");
  if (options.max_pending_connections < 0)
    return Status::InvalidArgument("coordinator: max_pending_connections must be >= 0");
  auto c = std::make_unique<CoordinatorImpl>(options);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace rtft::control
