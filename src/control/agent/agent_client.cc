// The agent client's calls (agent_client.h), made on the agent's threads: they queue messages
// for the loop (agent_links.cc) and wait, each with a deadline, for its answers.
#include "control/agent/agent_client.h"

#include "control/agent/agent_client_impl.h"
#include "core/logging.h"
#include "core/params.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::chrono::milliseconds MsParam(Param id) {
  auto v = ParamInt(id);
  if (v.ok() && *v > 0) return milliseconds(*v);
  RTFT_LOG(kWarn, kLogCtrl) << GetParamInfo(id).env << ": "
                            << (v.ok() ? "must be positive" : v.status().message())
                            << "; using 5000";
  return milliseconds(5000);
}

}  // namespace

AgentClientImpl::AgentClientImpl(const AgentClientOptions& o)
    : options_(o),
      primary_timeout_(o.primary_timeout.count() > 0
                           ? std::min(o.primary_timeout, o.coordinator_timeout)
                           : o.coordinator_timeout),
      ctx_(1) {}

Status AgentClientImpl::Init() {
  EventLoop::Options lo;
  lo.thread_name = "rtft-agent-ctl";
  lo.what = "the agent client's thread";
  lo.max_wait = milliseconds(100);
  lo.fault_point = options_.fault_point;
  // Nothing reaches the coordinator any more: every call says why from now on.
  lo.on_error = [this](const Status& s) { SetLost(s); };
  loop_ = std::make_unique<EventLoop>(std::move(lo));
  try {
    ctx_.set(zmq::ctxopt::max_sockets, 16);
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("agent client context: ") + e.what());
  }
  auto link = Connect(options_.endpoint, 0);
  if (!link.ok()) return link.status();
  primary_ = *link;
  loop_->SetTimer([this](SteadyClock::time_point now) { return OnTimer(now); });
  return loop_->Start();
}

void AgentClientImpl::Post(MsgType type, const json& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.push_back({type, body});
  }
  loop_->Wake();
}

StatusOr<json> AgentClientImpl::Request(uint64_t req, MsgType type, const json& body,
                                        milliseconds timeout) {
  if (auto bytes = EncodeMessage(type, body); !bytes.ok()) return bytes.status();
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
    inflight_[req] = {type, body};
  }
  Post(type, body);
  std::unique_lock<std::mutex> lock(mu_);
  const bool answered =
      cv_.wait_for(lock, timeout, [&] { return pending_[req].has_value() || !lost_.ok(); });
  std::optional<json> reply = std::move(pending_[req]);
  pending_.erase(req);
  inflight_.erase(req);
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

Status AgentClientImpl::ReportFailure(FailureKind kind, LogicalRank rank, int32_t detail) {
  const uint64_t req = next_req_++;
  auto reply =
      Request(req, MsgType::kFailure, FailureBody(req, options_.me.slot, kind, rank, detail),
              options_.request_timeout);
  if (!reply.ok()) return reply.status();
  return StatusFrom(*reply);
}

Status AgentClientImpl::ReportExit(int32_t code) {
  const uint64_t req = next_req_++;
  auto reply =
      Request(req, MsgType::kExit, ExitBody(req, options_.me.slot, code), options_.request_timeout);
  if (!reply.ok()) return reply.status();
  return StatusFrom(*reply);
}

void AgentClientImpl::SetDeadline(SteadyClock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  deadline_ = deadline;
}

Status AgentClientImpl::KvPut(const std::string& key, const std::string& value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes)
    return Status::InvalidArgument("KV key or value too large");
  const uint64_t req = next_req_++;
  auto reply = Request(req, MsgType::kKvPut, KvPutBody(req, key, value), options_.request_timeout);
  if (!reply.ok()) return reply.status();
  return StatusFrom(*reply);
}

StatusOr<std::string> AgentClientImpl::KvGet(const std::string& key, milliseconds timeout) {
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

StatusOr<uint64_t> AgentClientImpl::StartRequest(uint64_t req, MsgType type, const json& body,
                                                 milliseconds timeout, const char* what) {
  if (auto bytes = EncodeMessage(type, body); !bytes.ok()) return bytes.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.ok()) return lost_;
    if (!hello_sent_) return Status::FailedPrecondition(std::string(what) + " before Join");
    // The coordinator answers at its deadline; ours allows for the round trip.
    auto deadline = SteadyClock::now() + timeout + options_.request_timeout;
    if (deadline_) deadline = std::min(deadline, *deadline_);
    pending_[req];
    inflight_[req] = {type, body};
    started_[req] = deadline;
  }
  Post(type, body);
  return req;
}

std::optional<StatusOr<json>> AgentClientImpl::PollAnswer(uint64_t handle, const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto started = started_.find(handle);
  if (started == started_.end())
    return StatusOr<json>(Status::InvalidArgument(std::string("no such ") + what));
  auto p = pending_.find(handle);
  std::optional<StatusOr<json>> out;
  if (p != pending_.end() && p->second) {
    out = StatusOr<json>(std::move(*p->second));
  } else if (!lost_.ok()) {
    out = StatusOr<json>(lost_);
  } else if (SteadyClock::now() >= started->second) {
    out = StatusOr<json>(Status::DeadlineExceeded(
        std::string("no answer from the coordinator to a ") + what + " in time"));
  } else {
    return std::nullopt;
  }
  pending_.erase(handle);
  inflight_.erase(handle);
  started_.erase(started);
  return out;
}

StatusOr<uint64_t> AgentClientImpl::StartKvGet(const std::string& key, milliseconds timeout) {
  if (key.size() > kMaxKeyBytes) return Status::InvalidArgument("KV key too large");
  if (timeout.count() < 0) timeout = milliseconds(0);
  const uint64_t req = next_req_++;
  return StartRequest(req, MsgType::kKvGet, KvGetBody(req, key, timeout.count()), timeout,
                      "KV get");
}

std::optional<StatusOr<std::string>> AgentClientImpl::PollKvGet(uint64_t handle) {
  auto answer = PollAnswer(handle, "KV get");
  if (!answer) return std::nullopt;
  if (!answer->ok()) return StatusOr<std::string>(answer->status());
  const json& reply = **answer;
  if (Status s = StatusFrom(reply); !s.ok()) return StatusOr<std::string>(s);
  if (!reply.contains("value"))
    return StatusOr<std::string>(Status::Internal("KV reply without a value"));
  return StatusOr<std::string>(BytesFrom(reply["value"]));
}

StatusOr<uint64_t> AgentClientImpl::StartGather(const GatherRequest& g) {
  if (g.key.size() > kMaxKeyBytes || g.value.size() > kMaxGatherValueBytes)
    return Status::InvalidArgument("gather key or contribution too large");
  const uint64_t req = next_req_++;
  GatherRequest r = g;
  r.timeout_ms = std::max<int64_t>(0, g.timeout_ms);
  return StartRequest(req, MsgType::kGather, GatherBody(req, r), milliseconds(r.timeout_ms),
                      "gather");
}

std::optional<StatusOr<GatherReply>> AgentClientImpl::PollGather(uint64_t handle) {
  auto answer = PollAnswer(handle, "gather");
  if (!answer) return std::nullopt;
  if (!answer->ok()) return StatusOr<GatherReply>(answer->status());
  return GatherReplyFrom(**answer);
}

void AgentClientImpl::Forget(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(handle);
  inflight_.erase(handle);
  started_.erase(handle);
}

StatusOr<GatherReply> AgentClientImpl::Gather(const GatherRequest& g) {
  RTFT_ASSIGN_OR_RETURN(const uint64_t handle, StartGather(g));
  while (true) {
    if (auto r = PollGather(handle)) return std::move(*r);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, milliseconds(20), [&] {
      auto p = pending_.find(handle);
      return (p != pending_.end() && p->second) || !lost_.ok();
    });
  }
}

Status AgentClientImpl::GatherResult(const std::string& key, uint64_t epoch,
                                     const std::string& value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxGatherResultBytes)
    return Status::InvalidArgument("gather key or result too large");
  const uint64_t req = next_req_++;
  auto reply = Request(req, MsgType::kGatherResult, GatherResultBody(req, key, epoch, value),
                       options_.request_timeout);
  if (!reply.ok()) return reply.status();
  return StatusFrom(*reply);
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
  if (options.me.coordinator_endpoint.size() > kMaxEndpointBytes)
    return Status::InvalidArgument("the slot's coordinator endpoint is too long");
  const int32_t gpus = options.me.gpus, device = options.me.device;
  if (gpus < 0 || gpus > kMaxGpusPerNode || (gpus > 0 && (device < 0 || device >= gpus)))
    return Status::InvalidArgument("the slot's device " + std::to_string(device) +
                                   " is not one of its node's " + std::to_string(gpus) + " GPUs");
  auto c = std::make_unique<AgentClientImpl>(options);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<AgentClient>(std::move(c));
}

}  // namespace rtft::control
