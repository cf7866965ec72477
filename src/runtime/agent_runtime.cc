// The runtime of an application under dp-launch: the application's side of the local link to
// its agent. A runtime thread receives events and hands them to the callback and the PollEvent
// queue, and samples what the process is doing once per heartbeat period; the application's
// calls (steps with their own work, device errors, KV, gathers) go out on the same link.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "control/link/local_link.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/progress.h"
#include "core/thread.h"
#include "runtime/gather.h"
#include "runtime/pause.h"
#include "runtime/runtime_base.h"

namespace rtft::runtime_internal {
namespace {

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

class AgentRuntime final : public RuntimeBase,
                           public GatherService,
                           public PauseService,
                           public RepairService {
 public:
  AgentRuntime(std::unique_ptr<control::LocalClient> client, RuntimeInfo info)
      : RuntimeBase(info), client_(std::move(client)) {}
  Status Start() {
    RTFT_ASSIGN_OR_RETURN(thread_, Thread::Start("rtft-runtime", [this] { Loop(); }));
    return Status::Ok();
  }
  ~AgentRuntime() override {
    stop_ = true;
    thread_.Join();
    control::RuntimeReport detach;
    detach.type = control::RuntimeReport::Type::kDetach;
    (void)client_->Report(detach);
  }

  // With the step, its own work: the time since the step before ended, less the time spent in
  // watched calls (waiting for peers, moving their data) and the time the step's thread waited
  // for a CPU outside them, for the straggler detector (docs/protect.md, "Stragglers"). Only
  // between consecutive steps: the first after a start or a recovery includes the restore.
  Status ReportStep(uint64_t step) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kProgress;
    r.step = step;
    const uint64_t now = ProgressMonitor::NowNs();
    const uint64_t in_calls = ProgressMonitor::Get().InCallNanos();
    const std::optional<uint64_t> delay = ThreadRunDelayNanos();
    if (reported_ && step == last_step_ + 1) {
      const uint64_t wall = now - last_ns_, calls = in_calls - last_in_calls_;
      const uint64_t outside = wall > calls ? wall - calls : 0;
      // The run delay is counted for the whole step; the part outside the calls is taken as
      // theirs in proportion (the calls' own share is in `calls` already). A thread other than
      // the last report's (its counter is not this one's) subtracts nothing.
      uint64_t waited = 0;
      if (delay && last_delay_ && *delay >= *last_delay_ && wall > 0 &&
          last_thread_ == std::this_thread::get_id())
        waited = static_cast<uint64_t>(static_cast<double>(*delay - *last_delay_) *
                                       (static_cast<double>(outside) / static_cast<double>(wall)));
      r.work_us = static_cast<int64_t>((outside > waited ? outside - waited : 0) / 1000);
    }
    reported_ = true;
    last_step_ = step;
    last_ns_ = now;
    last_in_calls_ = in_calls;
    last_delay_ = delay;
    last_thread_ = std::this_thread::get_id();
    return client_->Report(r);
  }
  Status ReportDeviceError(const std::string& detail) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kDeviceError;
    r.detail = detail;
    RTFT_RETURN_IF_ERROR(client_->Report(r));
    // The application exits right after (DEVICE_LOST), and a report still queued in this process
    // would go with it: the agent would see a plain exit, not a device error. A round trip
    // through the agent after the report proves that the agent has handled it (the link is
    // ordered, and the agent takes a process's messages in order): a key put, then read back.
    const std::string key = "rtft/device_error/" + std::to_string(getpid());
    RTFT_RETURN_IF_ERROR(client_->KvPut(key, detail));
    return client_->KvGet(key, std::chrono::seconds(10)).status();
  }
  Status KvPut(const std::string& key, const std::string& value) override {
    return client_->KvPut(key, value);
  }
  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    return client_->KvGet(key, timeout);
  }
  // Served by the coordinator: one message from this rank, one answer back.
  StatusOr<KvGatherReply> ServeGather(const std::string& key, uint64_t epoch, int members,
                                      int index, const std::string& value, bool all,
                                      milliseconds timeout) override {
    control::GatherRequest g;
    g.key = key;
    g.epoch = epoch;
    g.members = members;
    g.index = index;
    g.value = value;
    g.all = all;
    g.timeout_ms = std::max<int64_t>(0, timeout.count());
    RTFT_ASSIGN_OR_RETURN(control::GatherReply r, client_->Gather(g));
    return KvGatherReply{std::move(r.values), std::move(r.result)};
  }
  Status ServeGatherResult(const std::string& key, uint64_t epoch,
                           const std::string& value) override {
    return client_->GatherResult(key, epoch, value);
  }
  std::optional<PauseRequest> PauseWanted() const override {
    std::lock_guard<std::mutex> lock(pause_mu_);
    return pause_;
  }
  void ReportCorruption(uint64_t step) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kCorrupt;
    r.step = step;
    (void)client_->Report(r);
  }
  void ReportPaused(const PauseRequest& at) override {
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kPaused;
    r.epoch = at.epoch;
    r.step = at.step;
    (void)client_->Report(r);  // a link that failed is the agent's to notice
  }

 private:
  // The link is thread-safe and wakes PollEvent as soon as an event arrives; the timeout bounds
  // how long the destructor waits for this thread. Once per heartbeat period the thread also
  // samples what the process is doing (core/progress.h) for its agent's heartbeats: one local
  // message per period, never one per call (docs/protect.md, "Hangs").
  void Loop() {
    const auto heartbeat = ParamInt(Param::kHeartbeatMs);
    const auto period =
        milliseconds(std::clamp<int64_t>(heartbeat.ok() ? *heartbeat : 100, 10, 1000));
    auto next_sample = std::chrono::steady_clock::now();
    while (!stop_) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_sample) {
        Sample();
        next_sample = now + period;
      }
      auto ev = client_->PollEvent(
          std::min(milliseconds(100),
                   std::chrono::duration_cast<milliseconds>(next_sample - now) + milliseconds(1)));
      // PollEvent returns early for a pause notice: taken here, every round.
      if (auto notice = client_->TakePause()) {
        std::lock_guard<std::mutex> lock(pause_mu_);
        if (notice->cancel)
          pause_.reset();
        else
          pause_ = PauseRequest{notice->epoch, notice->step};
      }
      if (!ev.ok()) {
        std::this_thread::sleep_for(milliseconds(100));
        continue;
      }
      if (!ev->has_value()) continue;
      Deliver(EventFrom(**ev));
    }
  }
  void Sample() {
    const ProgressSample now = ProgressMonitor::Get().Sample();
    control::RuntimeReport r;
    r.type = control::RuntimeReport::Type::kSample;
    r.progress.calls = now.calls;
    r.progress.in_call = now.in_call;
    r.progress.peer = now.peer;
    r.progress.long_phase = now.long_phase;
    (void)client_->Report(r);  // a link that failed is the agent's to notice
  }

  std::unique_ptr<control::LocalClient> client_;
  std::atomic<bool> stop_{false};
  Thread thread_;
  mutable std::mutex pause_mu_;
  std::optional<PauseRequest> pause_;  // the coordinator's, not cancelled
  // ReportStep's (the training thread's).
  bool reported_ = false;
  uint64_t last_step_ = 0, last_ns_ = 0, last_in_calls_ = 0;
  std::optional<uint64_t> last_delay_;  // the reporting thread's run delay at the last report
  std::thread::id last_thread_;
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

StatusOr<std::unique_ptr<Runtime>> CreateAgentRuntime(const RuntimeOptions& options) {
  const std::string socket = ParamString(Param::kAgentSocket);
  auto client = control::LocalClient::Connect(socket);
  if (!client.ok()) return client.status().Annotate("connecting to the agent at " + socket);
  RTFT_RETURN_IF_ERROR((*client)->Attach(static_cast<int32_t>(getpid())));
  auto a = WaitForAssignment(client->get(), options.standby_timeout);
  if (!a.ok()) return a.status().Annotate("waiting for a logical rank");
  RuntimeInfo info;
  info.role = RoleFrom(a->role);
  info.rank = a->rank;
  info.world_size = a->world_size;
  info.epoch = a->epoch;
  auto slot = ParamInt(Param::kSlot);
  info.slot = slot.ok() && *slot >= 0 ? static_cast<int>(*slot) : 0;
  // The rank's device as dp-launch gave it with the rank (a spare learns it only now, at its
  // activation: docs/launcher.md, "GPUs"); RTFT_DEVICE where dp-launch knows no GPU.
  info.device = a->device >= 0 ? a->device : Device();
  SetLogRank(info.rank);
  RTFT_LOG(kInfo, kLogRuntime) << "runtime: " << RuntimeRoleName(info.role) << " rank " << info.rank
                               << " of " << info.world_size << ", epoch " << info.epoch << ", slot "
                               << info.slot << ", device " << info.device;
  auto runtime = std::make_unique<AgentRuntime>(std::move(*client), info);
  RTFT_RETURN_IF_ERROR(runtime->Start());
  return std::unique_ptr<Runtime>(std::move(runtime));
}

}  // namespace rtft::runtime_internal
