// rtft::Runtime: the application's side of the local link to its agent (dp-launch). A runtime
// thread receives events and hands them to the callback and the PollEvent queue; the
// application's calls (steps, device errors, KV) go out on the same link.
#include "rtft/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "control/local_link.h"
#include "core/logging.h"
#include "runtime/app_env.h"

namespace rtft {

const char* RuntimeRoleName(RuntimeRole role) {
  switch (role) {
    case RuntimeRole::kInitial:
      return "initial";
    case RuntimeRole::kSpareActivated:
      return "spare-activated";
    case RuntimeRole::kRestarted:
      return "restarted";
    case RuntimeRole::kStandalone:
      return "standalone";
  }
  return "?";
}

Runtime::~Runtime() = default;

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Rank 0 of 1 without an agent; the KV store is this process's own.
class StandaloneRuntime final : public Runtime {
 public:
  const RuntimeInfo& info() const override { return info_; }
  void OnFailure(std::function<void(const FailureEvent&)>) override {}
  std::optional<FailureEvent> PollEvent() override { return std::nullopt; }
  Status ReportStep(uint64_t) override { return Status::Ok(); }
  Status ReportDeviceError(const std::string& detail) override {
    RTFT_LOG(kError, kLogRuntime) << "device error (standalone, no spare to take over): " << detail;
    return Status::Ok();
  }
  Status KvPut(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = Clock::now() + std::min(timeout, milliseconds(24LL * 3600 * 1000));
    if (!cv_.wait_until(lock, deadline, [&] { return kv_.count(key) > 0; }))
      return Status::DeadlineExceeded("KV key '" + key + "' not set");
    return kv_[key];
  }

 private:
  RuntimeInfo info_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

RuntimeRole RoleFrom(control::Role role) {
  switch (role) {
    case control::Role::kActivated:
      return RuntimeRole::kSpareActivated;
    case control::Role::kRestarted:
      return RuntimeRole::kRestarted;
    default:
      return RuntimeRole::kInitial;
  }
}

FailureEvent EventFrom(const control::ControlEvent& e) {
  FailureEvent f;
  f.epoch = e.membership.epoch;
  f.rank = e.assignment.rank;
  f.failed_ranks.assign(e.failed_ranks.begin(), e.failed_ranks.end());
  f.reason = e.reason;
  f.world_size = e.membership.world_size;
  f.shutdown = e.type == control::ControlEvent::Type::kShutdown;
  f.checkpoint_first = e.checkpoint_first;
  return f;
}

class AgentRuntime final : public Runtime {
 public:
  AgentRuntime(std::unique_ptr<control::LocalClient> client, RuntimeInfo info)
      : client_(std::move(client)), info_(info) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~AgentRuntime() override {
    stop_ = true;
    thread_.join();
    control::RuntimeReport detach;
    detach.type = control::RuntimeReport::Type::kDetach;
    (void)client_->Report(detach);
  }

  const RuntimeInfo& info() const override { return info_; }
  void OnFailure(std::function<void(const FailureEvent&)> callback) override {
    std::lock_guard<std::mutex> lock(events_mu_);
    callback_ = std::move(callback);
  }
  std::optional<FailureEvent> PollEvent() override {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (queue_.empty()) return std::nullopt;
    FailureEvent e = std::move(queue_.front());
    queue_.pop_front();
    return e;
  }
  Status ReportStep(uint64_t step) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kProgress;
    r.step = step;
    return client_->Report(r);
  }
  Status ReportDeviceError(const std::string& detail) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kDeviceError;
    r.detail = detail;
    return client_->Report(r);
  }
  Status KvPut(const std::string& key, const std::string& value) override {
    return client_->KvPut(key, value);
  }
  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    return client_->KvGet(key, timeout);
  }

 private:
  // The link is thread-safe and wakes PollEvent as soon as an event arrives; the timeout only
  // bounds how long the destructor waits for this thread.
  void Loop() {
    while (!stop_) {
      auto ev = client_->PollEvent(milliseconds(100));
      if (!ev.ok()) {
        std::this_thread::sleep_for(milliseconds(100));
        continue;
      }
      if (!ev->has_value()) continue;
      FailureEvent f = EventFrom(**ev);
      std::function<void(const FailureEvent&)> cb;
      {
        std::lock_guard<std::mutex> lock(events_mu_);
        queue_.push_back(f);
        cb = callback_;
      }
      if (cb) cb(f);
    }
  }

  std::unique_ptr<control::LocalClient> client_;
  const RuntimeInfo info_;
  std::mutex events_mu_;
  std::deque<FailureEvent> queue_;
  std::function<void(const FailureEvent&)> callback_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A spare may wait for hours: wait in slices so no deadline arithmetic overflows.
StatusOr<control::Assignment> WaitForAssignment(control::LocalClient* client, milliseconds limit) {
  const milliseconds slice(1000);
  milliseconds waited(0);
  while (true) {
    const milliseconds step = std::min(slice, limit - waited);
    auto a = client->WaitAssignment(step);
    if (a.ok() || a.status().code() != StatusCode::kDeadlineExceeded) return a;
    waited += step;
    if (waited >= limit) return a;
  }
}

}  // namespace

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  const char* socket = std::getenv(runtime::kEnvAgentSocket);
  if (!socket || !*socket) return std::unique_ptr<Runtime>(new StandaloneRuntime());
  auto client = control::LocalClient::Connect(socket);
  if (!client.ok())
    return client.status().Annotate("connecting to the agent at " + std::string(socket));
  RTFT_RETURN_IF_ERROR((*client)->Attach(static_cast<int32_t>(getpid())));
  auto a = WaitForAssignment(client->get(), options.standby_timeout);
  if (!a.ok()) return a.status().Annotate("waiting for a logical rank");
  RuntimeInfo info;
  info.role = RoleFrom(a->role);
  info.rank = a->rank;
  info.world_size = a->world_size;
  info.epoch = a->epoch;
  const char* slot = std::getenv(runtime::kEnvSlot);
  info.slot = slot ? std::atoi(slot) : 0;
  SetLogRank(info.rank);
  RTFT_LOG(kInfo, kLogRuntime) << "runtime: " << RuntimeRoleName(info.role) << " rank " << info.rank
                               << " of " << info.world_size << ", epoch " << info.epoch << ", slot "
                               << info.slot;
  return std::unique_ptr<Runtime>(new AgentRuntime(std::move(*client), info));
}

}  // namespace rtft
