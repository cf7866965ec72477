// The failure events a Protector hears: the newest epoch they name, and the job's shutdown. The
// listener runs on the runtime's event thread; the facade's recovery loop waits here on the
// application's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include "rtft/runtime.h"

namespace rtft::protect {

class EventWatch {
 public:
  explicit EventWatch(Runtime* runtime);
  ~EventWatch() { Stop(); }
  EventWatch(const EventWatch&) = delete;
  EventWatch& operator=(const EventWatch&) = delete;

  // Stops listening (the facade does it first when it ends); once.
  void Stop();
  // The newest epoch an event named, or the runtime's when that is ahead (a spare's Start()).
  uint64_t NewestEpoch() const;
  bool shutting_down() const { return shutdown_; }
  // Whether an epoch after `epoch` came before `deadline` (false at once when the job shuts down).
  bool WaitForEpochAfter(uint64_t epoch, std::chrono::steady_clock::time_point deadline) const;
  // The last shutdown event, if one came.
  std::optional<FailureEvent> shutdown_event() const;

 private:
  Runtime* rt_;
  uint64_t listener_ = 0;
  bool listening_ = true;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> shutdown_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<FailureEvent> shutdown_event_;  // under mu_
};

}  // namespace rtft::protect
