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
  auto k = by_key_.find(key);
  if (k == by_key_.end()) return ready;
  ready.reserve(k->second.size());
  for (uint64_t id : k->second) {
    auto w = waiting_.find(id);
    by_deadline_.erase(w->second.at);
    ready.push_back(std::move(w->second.waiter));
    waiting_.erase(w);
  }
  by_key_.erase(k);
  return ready;
}

StatusOr<std::optional<std::string>> KvStore::Get(const KvWaiter& waiter) {
  auto it = values_.find(waiter.key);
  if (it != values_.end()) return std::optional<std::string>(it->second);
  if (waiting_.size() >= max_waiters_) return Status::ResourceExhausted("too many waiting KV gets");
  const uint64_t id = next_id_++;
  const auto at = by_deadline_.emplace(waiter.deadline, id);
  waiting_.emplace(id, Waiting{waiter, at});
  by_key_[waiter.key].insert(id);
  return std::optional<std::string>();
}

std::vector<KvWaiter> KvStore::Expire(SteadyClock::time_point now) {
  std::vector<KvWaiter> expired;
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const uint64_t id = by_deadline_.begin()->second;
    by_deadline_.erase(by_deadline_.begin());
    auto w = waiting_.find(id);
    auto k = by_key_.find(w->second.waiter.key);
    k->second.erase(id);
    if (k->second.empty()) by_key_.erase(k);
    expired.push_back(std::move(w->second.waiter));
    waiting_.erase(w);
  }
  return expired;
}

std::optional<SteadyClock::time_point> KvStore::NextDeadline() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

}  // namespace rtft::control
