// An in-process CommStore: communicators whose ranks are threads of one process (the standalone
// runtime, tests) meet here.
#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/comm_internal.h"

namespace rtft {
namespace {

class LocalCommStore final : public CommStore {
 public:
  Status Put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return values_.count(key) > 0; }))
      return Status::DeadlineExceeded("key '" + key + "' was not put in time");
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::unique_ptr<CommStore> NewLocalCommStore() { return std::make_unique<LocalCommStore>(); }

}  // namespace rtft
