// The coordinator's implementation, shared by coordinator.cc (sockets, timers, decisions and
// their broadcast) and coordinator_handlers.cc (one handler per incoming message type). Private
// to src/control/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "control/coordinator.h"
#include "control/kv_store.h"
#include "control/membership_table.h"
#include "control/messages.h"
#include "control/zap.h"
#include "control/zmq_util.h"
#include "core/thread.h"

namespace rtft::control {

// Descriptors the coordinator's connection budget leaves to the rest of slot 0's process (the
// agent's own sockets, pipes and the application's restarts).
constexpr size_t kDescriptorReserve = 256;

// What the coordinator knows of one slot's agent.
struct CoordinatorSlot {
  bool joined = false;
  std::string peer;  // routing id of the agent's connection
  std::string host;
  SteadyClock::time_point last_seen{};
  SteadyClock::time_point last_retired_notice{};
  uint64_t step = 0;
};

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& o)
      : options_(o),
        table_({o.slots, o.spares, o.max_restarts_per_slot, o.on_spares_exhausted}),
        slots_(o.slots) {}

  ~CoordinatorImpl() override {
    stop_ = true;
    waker_.Notify();
    thread_.Join();
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
  std::optional<int> WaitJobEndFor(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return job_code_.has_value(); });
    return job_code_;
  }
  CoordinatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  Status error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void Run();
  void Tick(SteadyClock::time_point now);
  bool HandleRouter();  // false when nothing was waiting
  void Reject(const std::string& why);
  void Dispatch(const std::string& peer, const Message& msg);
  void OnHello(const std::string& peer, const nlohmann::json& b);
  void OnHeartbeat(SlotId slot, const std::string& peer, const nlohmann::json& b);
  void OnKvPut(const std::string& peer, const nlohmann::json& b);
  void OnKvGet(const std::string& peer, const nlohmann::json& b);
  void Ack(const std::string& peer, const nlohmann::json& b, const Status& status);
  void Apply(const Decision& d);
  void StartJob(const std::string& why);
  void Broadcast(const ControlEvent& event);
  void SendCurrent(SlotId slot);
  void Publish();

  CoordinatorOptions options_;
  MembershipTable table_;
  std::vector<CoordinatorSlot> slots_;
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
  Thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership snapshot_;
  CoordinatorStats stats_;
  std::optional<int> job_code_;
  Status error_;  // what ended the thread
};

}  // namespace rtft::control
