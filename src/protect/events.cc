#include "protect/events.h"

#include <algorithm>

namespace rtft::protect {

EventWatch::EventWatch(Runtime* runtime) : rt_(runtime) {
  listener_ = rt_->Subscribe([this](const FailureEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.shutdown) {
      shutdown_event_ = e;
      shutdown_ = true;
    }
    if (e.epoch > epoch_) epoch_ = e.epoch;
    cv_.notify_all();
  });
}

void EventWatch::Stop() {
  if (!listening_) return;
  listening_ = false;
  rt_->Unsubscribe(listener_);
}

uint64_t EventWatch::NewestEpoch() const { return std::max(epoch_.load(), rt_->current().epoch); }

bool EventWatch::WaitForEpochAfter(uint64_t epoch,
                                   std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  // The runtime's current epoch may move ahead of our listener (Start() of a spare): recheck it
  // every few milliseconds as well.
  while (NewestEpoch() <= epoch && !shutdown_ && std::chrono::steady_clock::now() < deadline)
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  return NewestEpoch() > epoch;
}

std::optional<FailureEvent> EventWatch::shutdown_event() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_event_;
}

}  // namespace rtft::protect
