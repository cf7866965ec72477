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

#include "control/coordinator/coordinator.h"
#include "control/coordinator/kv_store.h"
#include "control/coordinator/membership_table.h"
#include "control/coordinator/zap.h"
#include "control/net/event_loop.h"
#include "control/net/zmq_util.h"
#include "control/wire/messages.h"
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
        table_({o.slots, o.spares, o.max_restarts_per_slot, o.on_spares_exhausted,
                o.dedicated_slot ? 1 : 0}),
        slots_(o.slots) {}

  ~CoordinatorImpl() override { loop_.reset(); }

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
  // On the loop's thread.
  SteadyClock::time_point OnTimer(SteadyClock::time_point now);
  void Tick(SteadyClock::time_point now);
  void OnRejected(const std::string& peer, const std::string& why);
  void Reject(const std::string& why);
  bool Send(const std::string& peer, MsgType type, const nlohmann::json& body);
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

  SteadyClock::time_point next_tick_{};
  std::chrono::milliseconds tick_{100};

  zmq::context_t ctx_;
  std::unique_ptr<ZapHandler> zap_;
  std::string endpoint_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership snapshot_;
  CoordinatorStats stats_;
  std::optional<int> job_code_;
  Status error_;  // what ended the thread

  EventLoop::SocketId router_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread uses every member above
};

}  // namespace rtft::control
