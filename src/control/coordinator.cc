#include "control/coordinator.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "control/kv_store.h"
#include "control/membership_table.h"
#include "control/zap.h"
#include "control/zmq_util.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

struct SlotState {
  bool joined = false;
  std::string peer;  // routing id of the agent's connection
  std::string host;
  SteadyClock::time_point last_seen{};
  SteadyClock::time_point last_retired_notice{};
  uint64_t step = 0;
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& o)
      : options_(o),
        table_({o.slots, o.spares, o.max_restarts_per_slot, o.on_spares_exhausted}),
        slots_(o.slots) {}

  ~CoordinatorImpl() override {
    stop_ = true;
    waker_.Notify();
    if (thread_.joinable()) thread_.join();
  }

  Status Init();
  std::string endpoint() const override { return endpoint_; }
  Membership membership() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return snapshot_;
  }
  int WaitJobEnd() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return job_code_.has_value(); });
    return *job_code_;
  }
  std::optional<int> WaitJobEndFor(milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return job_code_.has_value(); });
    return job_code_;
  }
  CoordinatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void Run();
  void Tick(SteadyClock::time_point now);
  bool HandleRouter();  // false when nothing was waiting
  void Reject(const std::string& why);
  void Dispatch(const std::string& peer, const Message& msg);
  void OnHello(const std::string& peer, const json& b);
  void OnHeartbeat(SlotId slot, const std::string& peer, const json& b);
  void OnKvPut(const std::string& peer, const json& b);
  void OnKvGet(const std::string& peer, const json& b);
  void Ack(const std::string& peer, const json& b, const Status& status);
  void Apply(const Decision& d);
  void StartJob(const std::string& why);
  void Broadcast(const ControlEvent& event);
  void SendCurrent(SlotId slot);
  void Publish();

  CoordinatorOptions options_;
  MembershipTable table_;
  std::vector<SlotState> slots_;
  std::unordered_map<std::string, SlotId> by_peer_;
  KvStore kv_;
  bool started_ = false;
  SteadyClock::time_point join_deadline_{};
  ControlEvent current_;       // the latest broadcast
  std::string heartbeat_ack_;  // encoded once per epoch
  LogLimiter log_limit_;

  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::unique_ptr<ZapHandler> zap_;
  std::string endpoint_;
  Waker waker_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership snapshot_;
  CoordinatorStats stats_;
  std::optional<int> job_code_;
};

Status CoordinatorImpl::Init() {
  try {
    ctx_.set(zmq::ctxopt::thread_name_prefix, kCoordinatorZmqThreadPrefix);
    ctx_.set(zmq::ctxopt::max_sockets, 64);
    // The ZAP handler must be bound before the first connection arrives.
    RTFT_ASSIGN_OR_RETURN(zap_, ZapHandler::Create(ctx_, options_.keys.client_public));
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    ConfigureSocket(router_);
    MakeCurveServer(router_, options_.keys);
    // Every agent connects at about the same moment; a short listen queue drops SYNs and
    // costs each dropped agent a TCP retransmission timeout (1 s, 3 s, ...).
    router_.set(zmq::sockopt::backlog, std::max(128, std::min(options_.slots + 64, 65535)));
    RTFT_RETURN_IF_ERROR(zap_->Monitor(router_));
    const std::string host = options_.bind_host.empty() ? "*" : options_.bind_host;
    router_.bind("tcp://" + host + ":0");
    std::string bound = router_.get(zmq::sockopt::last_endpoint);
    const std::string port = bound.substr(bound.rfind(':') + 1);
    std::string advertise = options_.advertise_host;
    if (advertise.empty() && host != "*" && host != "0.0.0.0") advertise = host;
    if (advertise.empty()) {
      char name[256] = {};
      ::gethostname(name, sizeof(name) - 1);
      advertise = name;
    }
    endpoint_ = "tcp://" + advertise + ":" + port;
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("coordinator sockets: ") + e.what());
  }
  snapshot_ = table_.membership();
  stats_.epoch = snapshot_.epoch;
  stats_.epoch_declared_at = stats_.epoch_sent_at = SteadyClock::now();
  join_deadline_ = SteadyClock::now() + options_.join_timeout;
  Publish();
  thread_ = std::thread([this] { Run(); });
  RTFT_LOG(kInfo, kLogCtrl) << "coordinator at " << endpoint_ << ": " << options_.slots
                            << " slots, " << options_.spares << " spares, heartbeat timeout "
                            << options_.heartbeat_timeout.count() << " ms, on spares exhausted "
                            << PolicyName(options_.on_spares_exhausted);
  return Status::Ok();
}

void CoordinatorImpl::Run() {
  pthread_setname_np(pthread_self(), "rtft-coord");
  const int64_t tick_ms =
      std::max<int64_t>(2, std::min<int64_t>(100, options_.heartbeat_timeout.count() / 20));
  auto next_tick = SteadyClock::now();
  while (!stop_) {
    std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                          {nullptr, waker_.fd(), ZMQ_POLLIN, 0}};
    zap_->AddPollItems(&items);
    int64_t wait = MsUntil(next_tick, tick_ms);
    if (auto d = kv_.NextDeadline()) wait = std::min(wait, MsUntil(*d, tick_ms));
    try {
      zmq::poll(items.data(), items.size(), milliseconds(wait));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) RTFT_LOG(kError, kLogCtrl) << "coordinator poll: " << e.what();
    }
    if (items[1].revents & ZMQ_POLLIN) waker_.Drain();
    uint64_t rejected = zap_->Service(items, 2);
    if (rejected) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.rejected_peers += rejected;
    }
    // Bounded batches keep the timer checks timely under a flood.
    if (items[0].revents & ZMQ_POLLIN) {
      for (int i = 0; i < 4096 && HandleRouter(); ++i) {
      }
    }
    const auto now = SteadyClock::now();
    if (now >= next_tick) {
      Tick(now);
      next_tick = now + milliseconds(tick_ms);
    }
    for (const auto& w : kv_.Expire(now)) {
      KvWaiter copy = w;
      SendTo(
          router_, &copy.peer, MsgType::kKvValue,
          KvValueBody(w.req, Status::DeadlineExceeded("KV key '" + w.key + "' not put in time")));
    }
  }
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
      if (!slots_[s].joined) missing.push_back({s, FailureKind::kSlotLost, 0});
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

void CoordinatorImpl::Reject(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.rejected_messages;
  }
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed)) {
    RTFT_LOG(kWarn, kLogCtrl) << "rejected message: " << why
                              << (suppressed ? " (" + std::to_string(suppressed) +
                                                   " more rejections not logged)"
                                             : std::string());
  }
}

bool CoordinatorImpl::HandleRouter() {
  auto frames = RecvFrames(router_);
  if (!frames) return false;
  if (frames->size() != 2) {
    Reject(std::to_string(frames->size()) + " frames instead of 2");
    return true;
  }
  const std::string peer = (*frames)[0].to_string();
  auto msg = DecodeMessage((*frames)[1].data(), (*frames)[1].size());
  if (!msg.ok()) {
    auto it = by_peer_.find(peer);
    Reject(msg.status().message() +
           (it != by_peer_.end() ? " (from slot " + std::to_string(it->second) + ")" : ""));
    return true;
  }
  Dispatch(peer, *msg);
  return true;
}

void CoordinatorImpl::Dispatch(const std::string& peer, const Message& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.messages;
    if (msg.type == MsgType::kHeartbeat) ++stats_.heartbeats;
  }
  const json& b = msg.body;
  if (msg.type == MsgType::kHello) return OnHello(peer, b);
  if (msg.type == MsgType::kKvPut) return OnKvPut(peer, b);
  if (msg.type == MsgType::kKvGet) return OnKvGet(peer, b);
  auto it = by_peer_.find(peer);
  if (it == by_peer_.end())
    return Reject(std::string(MsgTypeName(msg.type)) + " from a peer that did not say hello");
  const SlotId slot = it->second;
  if (!b.contains("slot") || b["slot"].get<SlotId>() != slot) {
    return Reject(std::string(MsgTypeName(msg.type)) + " from slot " + std::to_string(slot) +
                  " names another slot");
  }
  slots_[slot].last_seen = SteadyClock::now();
  switch (msg.type) {
    case MsgType::kHeartbeat:
      return OnHeartbeat(slot, peer, b);
    case MsgType::kFailure: {
      const auto kind = static_cast<FailureKind>(b["kind"].get<int>());
      RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " reports " << FailureKindName(kind)
                                << " (detail " << b["detail"].get<int32_t>() << ")";
      if (kind == FailureKind::kSlotLost) {
        Ack(peer, b, Status::InvalidArgument("an agent cannot report its own slot lost"));
        return Reject("an agent may not report its own slot lost");
      }
      Ack(peer, b, Status::Ok());
      return Apply(table_.Fail({{slot, kind, b["detail"].get<int32_t>()}}));
    }
    case MsgType::kExit: {
      const int32_t code = b["xcode"].get<int32_t>();
      RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << ": application exited with " << code;
      Ack(peer, b, Status::Ok());
      return Apply(table_.Exit(slot, code));
    }
    default:
      return Reject(std::string(MsgTypeName(msg.type)) + " is not a message for the coordinator");
  }
}

void CoordinatorImpl::OnHello(const std::string& peer, const json& b) {
  const SlotId slot = b["slot"].get<SlotId>();
  if (slot >= table_.slots())
    return Reject("hello from slot " + std::to_string(slot) + " of a " +
                  std::to_string(table_.slots()) + "-slot job");
  auto known = by_peer_.find(peer);
  if (known != by_peer_.end() && known->second != slot)
    return Reject("hello for slot " + std::to_string(slot) + " on slot " +
                  std::to_string(known->second) + "'s connection");
  SlotState& st = slots_[slot];
  if (st.joined && st.peer != peer) {
    RTFT_LOG(kWarn, kLogCtrl) << "slot " << slot << " said hello again from a new connection";
    by_peer_.erase(st.peer);
  }
  st.joined = true;
  st.peer = peer;
  st.host = b["host"].get<std::string>();
  st.last_seen = SteadyClock::now();
  by_peer_[peer] = slot;
  RTFT_LOG(kInfo, kLogCtrl) << "slot " << slot << " joined from " << st.host << " (pid "
                            << b["pid"].get<int32_t>() << ")";
  if (started_ || table_.retired(slot)) return SendCurrent(slot);
  for (const auto& s : slots_) {
    if (!s.joined) return;
  }
  StartJob("every slot joined");
}

void CoordinatorImpl::OnHeartbeat(SlotId slot, const std::string& peer, const json& b) {
  SlotState& st = slots_[slot];
  st.step = b["step"].get<uint64_t>();
  if (table_.retired(slot)) {
    // A slot declared lost came back (e.g. its agent was stopped): remind it, once a second.
    const auto now = SteadyClock::now();
    if (now - st.last_retired_notice > std::chrono::seconds(1)) {
      st.last_retired_notice = now;
      SendCurrent(slot);
    }
    return;
  }
  // Acks only when asked (a few times per coordinator timeout): they are half the traffic.
  if (b.contains("ack") && b["ack"].get<bool>()) {
    std::string copy = peer;
    SendRaw(router_, &copy, heartbeat_ack_);
  }
}

void CoordinatorImpl::OnKvPut(const std::string& peer, const json& b) {
  if (by_peer_.find(peer) == by_peer_.end()) return Reject("kv-put from a peer without hello");
  auto ready = kv_.Put(b["key"].get<std::string>(), BytesFrom(b["value"]));
  if (!ready.ok()) return Ack(peer, b, ready.status());
  Ack(peer, b, Status::Ok());
  const std::string value = BytesFrom(b["value"]);
  for (auto& w : *ready) SendTo(router_, &w.peer, MsgType::kKvValue, KvValueBody(w.req, value));
}

void CoordinatorImpl::OnKvGet(const std::string& peer, const json& b) {
  if (by_peer_.find(peer) == by_peer_.end()) return Reject("kv-get from a peer without hello");
  KvWaiter w{peer, b["req"].get<uint64_t>(), b["key"].get<std::string>(),
             SteadyClock::now() + milliseconds(b["tmo"].get<int64_t>())};
  auto got = kv_.Get(w);
  std::string copy = peer;
  if (!got.ok()) {
    SendTo(router_, &copy, MsgType::kKvValue, KvValueBody(w.req, got.status()));
  } else if (got->has_value()) {
    SendTo(router_, &copy, MsgType::kKvValue, KvValueBody(w.req, **got));
  }
}

void CoordinatorImpl::Ack(const std::string& peer, const json& b, const Status& status) {
  std::string copy = peer;
  SendTo(router_, &copy, MsgType::kAck, AckBody(b["req"].get<uint64_t>(), status));
}

void CoordinatorImpl::Apply(const Decision& d) {
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
  Publish();
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
      if (router_.send(zmq::buffer(s.peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        (void)router_.send(m, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      RTFT_LOG(kDebug, kLogCtrl) << "event to a departed agent: " << e.what();
    }
  }
}

void CoordinatorImpl::SendCurrent(SlotId slot) {
  ControlEvent e = current_;
  e.membership = table_.membership();
  if (table_.retired(slot)) {
    e.type = ControlEvent::Type::kShutdown;
    e.reason = "slot " + std::to_string(slot) + " was retired";
  }
  SendTo(router_, &slots_[slot].peer, MsgType::kEvent, EventBody(e));
}

void CoordinatorImpl::Publish() {
  auto ack = EncodeMessage(MsgType::kHeartbeatAck, json{{"epoch", table_.membership().epoch}});
  if (ack.ok()) heartbeat_ack_ = std::move(*ack);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = table_.membership();
}

}  // namespace

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  if (options.slots < 1 || options.slots > kMaxSlots)
    return Status::InvalidArgument("coordinator: slots must be in [1, " +
                                   std::to_string(kMaxSlots) + "]");
  if (options.spares < 0 || options.spares >= options.slots)
    return Status::InvalidArgument("coordinator: spares must be in [0, slots - 1]");
  if (options.max_restarts_per_slot < 0)
    return Status::InvalidArgument("coordinator: max_restarts_per_slot must be >= 0");
  if (options.heartbeat_timeout.count() <= 0 || options.join_timeout.count() <= 0)
    return Status::InvalidArgument("coordinator: timeouts must be positive");
  auto c = std::make_unique<CoordinatorImpl>(options);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace rtft::control
