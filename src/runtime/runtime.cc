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

#include "control/link/local_link.h"
#include "core/host_env.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/progress.h"
#include "core/thread.h"
#include "runtime/gather.h"

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

// The threads that must end before the process does (NCCL aborts): joined here, before the exit
// handlers of HDF5 and CUDA run.
Runtime::~Runtime() { DrainLingering(); }

void Shutdown() { DrainLingering(); }

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// What both runtimes share: listeners, the event queue, the current place, the abort registry
// and the comm store over KvPut/KvGet. Events are delivered on one thread (Deliver).
class RuntimeBase : public Runtime {
 public:
  explicit RuntimeBase(RuntimeInfo info) : info_(info), current_(info), registry_(info.epoch) {}

  const RuntimeInfo& info() const override { return info_; }
  RuntimeInfo current() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  uint64_t Subscribe(Listener listener) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t token = next_token_++;
    listeners_[token] = std::move(listener);
    return token;
  }
  void Unsubscribe(uint64_t token) override {
    std::unique_lock<std::mutex> lock(mu_);
    listeners_.erase(token);
    // A listener may unsubscribe itself; anyone else waits until it has returned.
    if (std::this_thread::get_id() == delivering_thread_) return;
    idle_.wait(lock, [&] { return running_ != token; });
  }
  void OnFailure(Listener callback) override {
    uint64_t old = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = own_listener_;
      own_listener_ = 0;
    }
    if (old != 0) Unsubscribe(old);
    if (!callback) return;
    const uint64_t token = Subscribe(std::move(callback));
    std::lock_guard<std::mutex> lock(mu_);
    own_listener_ = token;
  }
  std::optional<FailureEvent> PollEvent() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return std::nullopt;
    FailureEvent e = std::move(queue_.front());
    queue_.pop_front();
    return e;
  }
  CommStore* comm_store() override { return &store_; }
  AbortRegistry* abort_registry() override { return &registry_; }

 protected:
  // Communicators first (their calls in flight return kAborted at once), then the listeners.
  void Deliver(const FailureEvent& e) {
    if (!e.shutdown) registry_.Advance(e.epoch);
    std::vector<uint64_t> tokens;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.epoch >= current_.epoch) {
        current_.epoch = e.epoch;
        if (e.rank >= 0) current_.rank = e.rank;
        if (e.world_size > 0) current_.world_size = e.world_size;
      }
      queue_.push_back(e);
      delivering_thread_ = std::this_thread::get_id();
      for (const auto& [token, listener] : listeners_) tokens.push_back(token);
    }
    for (uint64_t token : tokens) {
      Listener listener;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = listeners_.find(token);
        if (it == listeners_.end()) continue;
        listener = it->second;
        running_ = token;
      }
      // A listener that throws is the application's bug; it must not end the rank's event
      // thread (every later event would be lost): logged, and the next listener runs.
      (void)RunGuarded("a failure-event listener", [&] { listener(e); });
      std::lock_guard<std::mutex> lock(mu_);
      running_ = 0;
      idle_.notify_all();
    }
  }

 private:
  // The job's key-value store as the comm layer's CommStore.
  class KvStore final : public CommStore {
   public:
    explicit KvStore(Runtime* rt) : rt_(rt) {}
    Status Put(const std::string& key, const std::string& value) override {
      return rt_->KvPut(key, value);
    }
    StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
      const auto left = deadline - CommClock::now();
      return rt_->KvGet(key, std::max(milliseconds(0), std::chrono::ceil<milliseconds>(left)));
    }

   private:
    Runtime* rt_;
  };

  const RuntimeInfo info_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  RuntimeInfo current_;
  std::map<uint64_t, Listener> listeners_;
  uint64_t next_token_ = 1, running_ = 0, own_listener_ = 0;
  std::thread::id delivering_thread_;
  std::deque<FailureEvent> queue_;
  EpochAbortRegistry registry_;
  KvStore store_{this};
};

// Rank 0 of 1 without an agent; the KV store is this process's own.
class StandaloneRuntime final : public RuntimeBase {
 public:
  explicit StandaloneRuntime(int device) : RuntimeBase(Info(device)) {}
  Status ReportStep(uint64_t) override { return Status::Ok(); }
  static RuntimeInfo Info(int device) {
    RuntimeInfo info;
    info.device = device;
    return info;
  }
  Status ReportDeviceError(const std::string& detail) override {
    RTFT_LOG(kError, kLogRuntime) << "device error (standalone, no spare to take over): " << detail;
    return Status::Ok();
  }
  Status KvPut(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(kv_mu_);
    kv_[key] = value;
    kv_cv_.notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(kv_mu_);
    const auto deadline = Clock::now() + std::min(timeout, milliseconds(24LL * 3600 * 1000));
    if (!kv_cv_.wait_until(lock, deadline, [&] { return kv_.count(key) > 0; }))
      return Status::DeadlineExceeded("KV key '" + key + "' not set");
    return kv_[key];
  }

 private:
  std::mutex kv_mu_;
  std::condition_variable kv_cv_;
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

class AgentRuntime final : public RuntimeBase, public GatherService {
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

StatusOr<std::unique_ptr<Communicator>> Runtime::CreateCommunicator(const std::string& name,
                                                                    CommOptions options) {
  const RuntimeInfo now = current();
  options.rank = now.rank;
  options.world_size = now.world_size;
  options.epoch = now.epoch;
  options.name = name;
  options.store = comm_store();
  options.aborts = abort_registry();
  return Communicator::Create(options);
}

StatusOr<std::unique_ptr<Communicator>> Runtime::CreateGroupCommunicator(const std::string& name,
                                                                         int group_rank,
                                                                         int group_size,
                                                                         CommOptions options) {
  const RuntimeInfo now = current();
  if (group_size < 1 || group_size > now.world_size || group_rank < 0 || group_rank >= group_size)
    return Status::InvalidArgument("a group communicator '" + name + "' of " +
                                   std::to_string(group_size) + " ranks with this one at " +
                                   std::to_string(group_rank) + " in a world of " +
                                   std::to_string(now.world_size));
  options.rank = group_rank;
  options.world_size = group_size;
  options.epoch = now.epoch;
  options.name = name;
  options.store = comm_store();
  options.aborts = abort_registry();
  return Communicator::Create(options);
}

namespace {

// RTFT_DEVICE, checked: a negative or malformed value is device 0, with a warning.
int Device() {
  auto d = ParamInt(Param::kDevice);
  if (d.ok() && *d >= 0 && *d < (1 << 16)) return static_cast<int>(*d);
  RTFT_LOG(kWarn, kLogRuntime) << "RTFT_DEVICE=" << ParamString(Param::kDevice)
                               << " is no CUDA device ordinal: device 0";
  return 0;
}

// No agent: a standalone runtime, unless a launcher started several processes, which would all
// become rank 0 of 1 and write one checkpoint directory.
StatusOr<std::unique_ptr<Runtime>> CreateStandalone() {
  const LauncherCount n = LauncherProcesses();
  if (n.count > 1) {
    const std::string what =
        std::string(n.from) + "=" + std::to_string(n.count) +
        " says a launcher started several processes, but this one has no dp-launch agent "
        "(RTFT_AGENT_SOCKET is unset): each runs as a standalone rank 0 of 1, with no failure "
        "handling. Start the application under dp-launch: mpirun ... dp-launch -- ./app";
    RTFT_ASSIGN_OR_RETURN(bool required, ParamBool(Param::kRequireAgent));
    if (required) return Status::FailedPrecondition(what + " (RTFT_REQUIRE_AGENT=1)");
    RTFT_LOG(kError, kLogRuntime) << what << " (RTFT_REQUIRE_AGENT=1 makes this an error)";
  }
  return std::unique_ptr<Runtime>(new StandaloneRuntime(Device()));
}

}  // namespace

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  if (!ParamIsSet(Param::kAgentSocket)) return CreateStandalone();
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

}  // namespace rtft
