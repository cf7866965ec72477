#include "control/coordinator/kv_store.h"

namespace rtft::control {

StatusOr<std::vector<KvWaiter>> KvStore::Put(const std::string& key, const std::string& value) {
  auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  if (bytes_ - old + key.size() + value.size() > max_bytes_)
    return Status::ResourceExhausted("KV store full (" + std::to_string(max_bytes_) + " bytes)");
  bytes_ = bytes_ - old + key.size() + value.size();
  values_[key] = value;
  std::vector<KvWaiter> ready;
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    if (w->second.key == key) {
      ready.push_back(std::move(w->second));
      w = waiters_.erase(w);
    } else {
      ++w;
    }
  }
  return ready;
}

StatusOr<std::optional<std::string>> KvStore::Get(const KvWaiter& waiter) {
  auto it = values_.find(waiter.key);
  if (it != values_.end()) return std::optional<std::string>(it->second);
  if (waiters_.size() >= max_waiters_) return Status::ResourceExhausted("too many waiting KV gets");
  waiters_.emplace(waiter.deadline, waiter);
  return std::optional<std::string>();
}

std::vector<KvWaiter> KvStore::Expire(SteadyClock::time_point now) {
  std::vector<KvWaiter> expired;
  while (!waiters_.empty() && waiters_.begin()->first <= now) {
    expired.push_back(std::move(waiters_.begin()->second));
    waiters_.erase(waiters_.begin());
  }
  return expired;
}

std::optional<SteadyClock::time_point> KvStore::NextDeadline() const {
  if (waiters_.empty()) return std::nullopt;
  return waiters_.begin()->first;
}

}  // namespace rtft::control
