// What the standalone runtime (runtime.cc) and the agent's (agent_runtime.cc) share: listeners,
// the event queue, the current place, the abort registry and the comm store over KvPut/KvGet.
// Events are delivered on one thread (Deliver). Internal to src/runtime.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/thread.h"
#include "rtft/comm.h"
#include "rtft/runtime.h"

namespace rtft::runtime_internal {

using std::chrono::milliseconds;

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

// RTFT_DEVICE, checked: a negative or malformed value is device 0, with a warning.
int Device();

// The runtime of an application under dp-launch: attaches to its agent over RTFT_AGENT_SOCKET and
// waits for its rank (a spare: for its activation) for up to `options.standby_timeout`.
StatusOr<std::unique_ptr<Runtime>> CreateAgentRuntime(const RuntimeOptions& options);

}  // namespace rtft::runtime_internal
