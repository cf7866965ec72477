// The job's key-value store, held by the coordinator: puts, and gets that wait until the key is
// put or their deadline passes. Later used for Gloo rendezvous and NCCL unique ids. No I/O:
// the coordinator answers the waiters this returns.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/net/zmq_util.h"
#include "rtft/status.h"

namespace rtft::control {

struct KvWaiter {
  std::string peer;  // routing id
  uint64_t req = 0;
  std::string key;
  SteadyClock::time_point deadline;
};

class KvStore {
 public:
  explicit KvStore(size_t max_bytes = size_t{256} << 20, size_t max_waiters = 1 << 20)
      : max_bytes_(max_bytes), max_waiters_(max_waiters) {}

  // Stores (or replaces) the value; returns the waiters it satisfies, in the order they came.
  // Costs the key's waiters, not every waiter's (thousands of ranks each wait for their own
  // neighbours' keys at once: docs/comm.md, "Which pairs connect").
  StatusOr<std::vector<KvWaiter>> Put(const std::string& key, const std::string& value);
  // The value if present; otherwise the waiter is queued (ResourceExhausted when too many).
  StatusOr<std::optional<std::string>> Get(const KvWaiter& waiter);
  // Removes and returns the waiters whose deadline is at or before `now`.
  std::vector<KvWaiter> Expire(SteadyClock::time_point now);
  // The earliest waiter deadline, if any.
  std::optional<SteadyClock::time_point> NextDeadline() const;
  size_t size() const { return values_.size(); }
  // Every entry (a new standby receives them all).
  const std::unordered_map<std::string, std::string>& values() const { return values_; }

 private:
  struct Waiting {
    KvWaiter waiter;
    std::multimap<SteadyClock::time_point, uint64_t>::iterator at;  // in by_deadline_
  };
  size_t max_bytes_, max_waiters_;
  size_t bytes_ = 0;
  std::unordered_map<std::string, std::string> values_;
  // The waiting gets by number (in arrival order), by deadline and by key.
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Waiting> waiting_;
  std::multimap<SteadyClock::time_point, uint64_t> by_deadline_;
  std::unordered_map<std::string, std::set<uint64_t>> by_key_;
};

}  // namespace rtft::control
