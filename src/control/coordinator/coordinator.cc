// The coordinator's setup: its options checked, the sockets bound, the first role chosen and the
// event loop started.
#include <unistd.h>

#include <algorithm>

#include "control/coordinator/coordinator_impl.h"
#include "control/coordinator/primary.h"
#include "control/coordinator/standby.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

// The router every agent connects to: CURVE server, the job's ZAP handler watching it.
StatusOr<zmq::socket_t> BindRouter(zmq::context_t& ctx, const CoordinatorOptions& o,
                                   ZapHandler* zap, std::string* endpoint) {
  zmq::socket_t router(ctx, zmq::socket_type::router);
  ConfigureSocket(router);
  MakeCurveServer(router, o.keys);
  router.set(zmq::sockopt::handshake_ivl, static_cast<int>(o.handshake_timeout.count()));
  // Every agent connects at about the same moment; a short listen queue drops SYNs and
  // costs each dropped agent a TCP retransmission timeout (1 s, 3 s, ...).
  router.set(zmq::sockopt::backlog, std::max(128, std::min(o.slots + 64, 65535)));
  RTFT_RETURN_IF_ERROR(zap->Monitor(router));
  const std::string host = o.bind_host.empty() ? "*" : o.bind_host;
  router.bind("tcp://" + host + ":0");
  std::string bound = router.get(zmq::sockopt::last_endpoint);
  const std::string port = bound.substr(bound.rfind(':') + 1);
  std::string advertise = o.advertise_host;
  if (advertise.empty() && host != "*" && host != "0.0.0.0") advertise = host;
  if (advertise.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    advertise = name;
  }
  *endpoint = "tcp://" + advertise + ":" + port;
  return router;
}

}  // namespace

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& o)
    : options_(o), state_(o), gen_(o.standby ? 0 : 1) {}

Status CoordinatorImpl::Init() {
  EventLoop::Options lo;
  lo.thread_name = options_.standby ? "rtft-standby" : "rtft-coord";
  lo.what = "the coordinator's thread";
  lo.fault_point = options_.fault_point;
  // No decision can be taken any more: the job ends (exit code 1), and says why.
  lo.on_error = [this](const Status& s) { view_.Fail(s); };
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
    RTFT_ASSIGN_OR_RETURN(zmq::socket_t router, BindRouter(ctx_, options_, zap_.get(), &endpoint_));
    router_ = loop_->AddSocket(
        std::move(router), true, "coordinator",
        [this](const std::string& peer, Message m) { Dispatch(peer, m); },
        [this](const std::string& peer, const std::string& why) { OnRejected(peer, why); });
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("coordinator sockets: ") + e.what());
  }
  zap_->Attach(loop_.get(), [this](uint64_t refused) {
    view_.CountRefusedPeers(refused, zap_->closed_over_cap());
  });
  const auto join_deadline = SteadyClock::now() + options_.join_timeout;
  if (options_.standby) {
    role_ = std::make_unique<StandbyRole>(*this);
  } else {
    role_ = std::make_unique<PrimaryRole>(*this, join_deadline);
  }
  Publish(state_.table().membership());
  view_.StartEpoch(state_.table().membership().epoch);
  tick_ = milliseconds(
      std::max<int64_t>(2, std::min<int64_t>(100, options_.heartbeat_timeout.count() / 20)));
  loop_->SetTimer([this](SteadyClock::time_point now) { return OnTimer(now); });
  RTFT_RETURN_IF_ERROR(loop_->Start());
  RTFT_LOG(kInfo, kLogCtrl) << (options_.standby ? "standby-capable coordinator" : "coordinator")
                            << " at " << endpoint_ << ": " << options_.slots << " slots, "
                            << options_.spares << " spares, heartbeat timeout "
                            << options_.heartbeat_timeout.count() << " ms, on spares exhausted "
                            << PolicyName(options_.on_spares_exhausted)
                            << (options_.replicate ? ", with a standby" : "");
  return Status::Ok();
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
  if (options.self_slot < 0 || options.self_slot >= options.slots)
    return Status::InvalidArgument("coordinator: self_slot must be one of the job's slots");
  auto c = std::make_unique<CoordinatorImpl>(options);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace rtft::control
