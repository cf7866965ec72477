// An in-process CommStore: communicators whose ranks are threads of one process (the standalone
// runtime, tests) meet here.
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "comm/comm_internal.h"

namespace rtft {
namespace {

class LocalCommStore final : public CommStore {
 public:
  Status Put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    // Only the gets of this key wake (a communicator's ranks wait on many keys at once).
    auto w = waiting_.find(key);
    if (w != waiting_.end()) w->second->notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto v = values_.find(key);
    if (v != values_.end()) return v->second;
    std::shared_ptr<std::condition_variable> cv;
    auto w = waiting_.find(key);
    if (w == waiting_.end()) {
      cv = std::make_shared<std::condition_variable>();
      waiting_.emplace(key, cv);
    } else {
      cv = w->second;
    }
    const bool put = cv->wait_until(lock, deadline, [&] { return values_.count(key) > 0; });
    // The last waiter of a key removes its entry (the map holds one owner, each waiter another).
    w = waiting_.find(key);
    if (w != waiting_.end() && w->second.use_count() == 2) waiting_.erase(w);
    if (!put) return Status::DeadlineExceeded("key '" + key + "' was not put in time");
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::shared_ptr<std::condition_variable>> waiting_;
};

}  // namespace

std::unique_ptr<CommStore> NewLocalCommStore() { return std::make_unique<LocalCommStore>(); }

}  // namespace rtft
