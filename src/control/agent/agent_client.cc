#include "control/agent/agent_client.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "control/net/event_loop.h"
#include "control/net/zmq_util.h"
#include "control/wire/messages.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

class AgentClientImpl final : public AgentClient {
 public:
  explicit AgentClientImpl(const AgentClientOptions& o) : options_(o), ctx_(1) {}
  ~AgentClientImpl() override { loop_.reset(); }

  Status Init() {
    EventLoop::Options lo;
    lo.thread_name = "rtft-agent-ctl";
    lo.what = "the agent client's thread";
    lo.max_wait = milliseconds(100);
    lo.fault_point = options_.fault_point;
    // Nothing reaches the coordinator any more: every call says why from now on.
    lo.on_error = [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu_);
      if (lost_.ok()) lost_ = s;
      cv_.notify_all();
    };
    loop_ = std::make_unique<EventLoop>(std::move(lo));
    try {
      ctx_.set(zmq::ctxopt::max_sockets, 16);
      zmq::socket_t socket(ctx_, zmq::socket_type::dealer);
      ConfigureSocket(socket);
      MakeCurveClient(socket, options_.keys);
      socket.connect(options_.endpoint);
      socket_ = loop_->AddSocket(
          std::move(socket), false, "coordinator connection",
          [this](const std::string&, Message m) { OnMessage(std::move(m)); },
          [this](const std::string&, const std::string& why) { OnReject(why); });
    } catch (const zmq::error_t& e) {
      return Status::InvalidArgument("connecting to coordinator " + options_.endpoint + ": " +
                                     e.what());
    }
    loop_->SetTimer([this](SteadyClock::time_point now) { return OnTimer(now); });
    return loop_->Start();
  }

  StatusOr<Assignment> Join(milliseconds timeout) override;
  Status ReportFailure(FailureKind kind, LogicalRank rank, int32_t detail) override {
    const uint64_t req = next_req_++;
    auto reply =
        Request(req, MsgType::kFailure, FailureBody(req, options_.me.slot, kind, rank, detail),
                options_.request_timeout);
    if (!reply.ok()) return reply.status();
    return StatusFrom(*reply);
  }
  void SetProgress(uint64_t step) override { step_ = step; }
  Status ReportExit(int32_t code) override {
    const uint64_t req = next_req_++;
    auto reply = Request(req, MsgType::kExit, ExitBody(req, options_.me.slot, code),
                         options_.request_timeout);
    if (!reply.ok()) return reply.status();
    return StatusFrom(*reply);
  }
  StatusOr<std::optional<ControlEvent>> WaitEvent(milliseconds timeout) override;
  void SetDeadline(SteadyClock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    deadline_ = deadline;
  }
  Status KvPut(const std::string& key, const std::string& value) override {
    if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes)
      return Status::InvalidArgument("KV key or value too large");
    const uint64_t req = next_req_++;
    auto reply =
        Request(req, MsgType::kKvPut, KvPutBody(req, key, value), options_.request_timeout);
    if (!reply.ok()) return reply.status();
    return StatusFrom(*reply);
  }
  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    if (key.size() > kMaxKeyBytes) return Status::InvalidArgument("KV key too large");
    if (timeout.count() < 0) timeout = milliseconds(0);
    const uint64_t req = next_req_++;
    // The coordinator answers at its deadline; ours allows for the round trip.
    auto reply = Request(req, MsgType::kKvGet, KvGetBody(req, key, timeout.count()),
                         timeout + options_.request_timeout);
    if (!reply.ok()) return reply.status();
    RTFT_RETURN_IF_ERROR(StatusFrom(*reply));
    if (!reply->contains("value")) return Status::Internal("KV reply without a value");
    return BytesFrom((*reply)["value"]);
  }

 private:
  // On the loop's thread.
  void OnMessage(Message msg);
  void OnReject(const std::string& why);
  SteadyClock::time_point OnTimer(SteadyClock::time_point now);
  void Post(MsgType type, const json& body);
  StatusOr<json> Request(uint64_t req, MsgType type, const json& body, milliseconds timeout);

  const AgentClientOptions options_;
  zmq::context_t ctx_;
  std::atomic<uint64_t> step_{0};
  std::atomic<uint64_t> next_req_{1};
  // The loop's own state.
  LogLimiter log_limit_;
  SteadyClock::time_point next_beat_{}, last_heard_{}, last_ack_request_{};
  uint64_t seq_ = 0;
  bool beating_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool hello_sent_ = false;
  std::optional<Assignment> first_;
  std::deque<ControlEvent> events_;
  std::unordered_map<uint64_t, std::optional<json>> pending_;
  Status lost_;                                      // set once the coordinator is gone
  std::optional<SteadyClock::time_point> deadline_;  // SetDeadline
  EventLoop::SocketId socket_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread uses the members above
};

void AgentClientImpl::Post(MsgType type, const json& body) {
  auto bytes = EncodeMessage(type, body);
  if (!bytes.ok()) {
    RTFT_LOG(kError, kLogCtrl) << "not sending " << MsgTypeName(type) << ": " << bytes.status();
    return;
  }
  (void)loop_->Post(socket_, "", std::move(*bytes));
}

StatusOr<json> AgentClientImpl::Request(uint64_t req, MsgType type, const json& body,
                                        milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.ok()) return lost_;
    // The coordinator answers only connections that said hello.
    if (!hello_sent_)
      return Status::FailedPrecondition(std::string(MsgTypeName(type)) + " before Join");
    if (deadline_)
      timeout =
          std::max(milliseconds(0), std::min(timeout, std::chrono::duration_cast<milliseconds>(
                                                          *deadline_ - SteadyClock::now())));
    pending_[req];
  }
  Post(type, body);
  std::unique_lock<std::mutex> lock(mu_);
  const bool answered =
      cv_.wait_for(lock, timeout, [&] { return pending_[req].has_value() || !lost_.ok(); });
  std::optional<json> reply = std::move(pending_[req]);
  pending_.erase(req);
  if (reply) return std::move(*reply);
  if (!answered)
    return Status::DeadlineExceeded(std::string("no answer from the coordinator to ") +
                                    MsgTypeName(type) + " within " +
                                    std::to_string(timeout.count()) + " ms");
  return lost_;
}

StatusOr<Assignment> AgentClientImpl::Join(milliseconds timeout) {
  bool send_hello = false;
  {
    // A second Join (after a timeout) waits again for the same answer.
    std::lock_guard<std::mutex> lock(mu_);
    send_hello = !hello_sent_;
    hello_sent_ = true;
  }
  if (send_hello) Post(MsgType::kHello, HelloBody(options_.me));
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return first_.has_value() || !lost_.ok(); }))
    return Status::DeadlineExceeded("slot " + std::to_string(options_.me.slot) +
                                    ": no assignment from the coordinator at " + options_.endpoint +
                                    " within " + std::to_string(timeout.count()) + " ms");
  if (first_) return *first_;
  return lost_;
}

StatusOr<std::optional<ControlEvent>> AgentClientImpl::WaitEvent(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || !lost_.ok(); });
  if (!events_.empty()) {
    ControlEvent e = std::move(events_.front());
    events_.pop_front();
    return std::optional<ControlEvent>(std::move(e));
  }
  if (!lost_.ok()) return lost_;
  return std::optional<ControlEvent>();
}

void AgentClientImpl::OnReject(const std::string& why) {
  last_heard_ = SteadyClock::now();
  uint64_t suppressed = 0;
  if (log_limit_.Allow(&suppressed))
    RTFT_LOG(kWarn, kLogCtrl) << "rejected message from the coordinator: " << why;
}

void AgentClientImpl::OnMessage(Message msg) {
  last_heard_ = SteadyClock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (msg.type == MsgType::kEvent) {
    ControlEvent e = EventFrom(msg.body, options_.me.slot);
    if (!first_) {
      first_ = e.assignment;
      // A first event that already ends the job must still reach WaitEvent.
      if (e.type == ControlEvent::Type::kShutdown) events_.push_back(std::move(e));
    } else {
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  } else if (msg.type == MsgType::kAck || msg.type == MsgType::kKvValue) {
    auto it = pending_.find(msg.body["req"].get<uint64_t>());
    if (it != pending_.end()) {
      it->second = std::move(msg.body);
      cv_.notify_all();
    }
  } else if (msg.type != MsgType::kHeartbeatAck) {
    RTFT_LOG(kWarn, kLogCtrl) << "unexpected " << MsgTypeName(msg.type) << " from the coordinator";
  }
}

SteadyClock::time_point AgentClientImpl::OnTimer(SteadyClock::time_point now) {
  if (!beating_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!hello_sent_) return now + milliseconds(20);
    beating_ = true;
    last_heard_ = now;
  }
  if (now >= next_beat_) {
    // Ask for an ack four times per coordinator timeout.
    const bool want_ack = now - last_ack_request_ >= options_.coordinator_timeout / 4;
    if (want_ack) last_ack_request_ = now;
    loop_->SendNow(socket_, "", MsgType::kHeartbeat,
                   HeartbeatBody(options_.me.slot, step_.load(), seq_++, want_ack));
    next_beat_ = now + options_.heartbeat_period;
  }
  if (now - last_heard_ > options_.coordinator_timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_.ok()) {
      lost_ = Status::Unavailable("coordinator " + options_.endpoint + " silent for " +
                                  std::to_string(options_.coordinator_timeout.count()) +
                                  " ms: slot 0 lost?");
      RTFT_LOG(kError, kLogCtrl) << lost_.message();
      cv_.notify_all();
    }
  }
  return next_beat_;
}

std::chrono::milliseconds MsParam(Param id) {
  auto v = ParamInt(id);
  if (v.ok() && *v > 0) return milliseconds(*v);
  RTFT_LOG(kWarn, kLogCtrl) << GetParamInfo(id).env << ": "
                            << (v.ok() ? "must be positive" : v.status().message())
                            << "; using 5000";
  return milliseconds(5000);
}

}  // namespace

std::chrono::milliseconds DefaultRequestTimeout() { return MsParam(Param::kCtrlRequestTimeoutMs); }
std::chrono::milliseconds DefaultCoordinatorTimeout() {
  return MsParam(Param::kCtrlCoordinatorTimeoutMs);
}

StatusOr<std::unique_ptr<AgentClient>> AgentClient::Connect(const AgentClientOptions& options) {
  if (options.endpoint.empty()) return Status::InvalidArgument("no coordinator endpoint");
  if (options.me.slot < 0 || options.me.slot >= kMaxSlots)
    return Status::InvalidArgument("slot out of range");
  if (options.heartbeat_period.count() <= 0)
    return Status::InvalidArgument("heartbeat period must be positive");
  auto c = std::make_unique<AgentClientImpl>(options);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<AgentClient>(std::move(c));
}

}  // namespace rtft::control
