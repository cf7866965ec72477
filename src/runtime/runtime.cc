// rtft::Runtime: the standalone runtime (rank 0 of 1, no agent), the communicators a runtime
// creates, and Runtime::Create, which picks the standalone runtime or the agent's
// (agent_runtime.cc, over the local link to dp-launch).
#include "rtft/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "core/host_env.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread.h"
#include "runtime/runtime_base.h"

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

namespace runtime_internal {

int Device() {
  auto d = ParamInt(Param::kDevice);
  if (d.ok() && *d >= 0 && *d < (1 << 16)) return static_cast<int>(*d);
  RTFT_LOG(kWarn, kLogRuntime) << "RTFT_DEVICE=" << ParamString(Param::kDevice)
                               << " is no CUDA device ordinal: device 0";
  return 0;
}

}  // namespace runtime_internal

namespace {

using runtime_internal::Device;
using runtime_internal::RuntimeBase;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

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
  return runtime_internal::CreateAgentRuntime(options);
}

}  // namespace rtft
