#include "protect/fake_runtime.h"

#include <algorithm>

namespace rtft::protect::test {
namespace {

using std::chrono::milliseconds;

// The job's key-value store as the comm layer's CommStore.
class JobStore final : public CommStore {
 public:
  explicit JobStore(FakeJob* job) : job_(job) {}
  Status Put(const std::string& key, const std::string& value) override {
    return job_->Put(key, value);
  }
  StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
    const auto left = std::chrono::ceil<milliseconds>(deadline - CommClock::now());
    return job_->Get(key, std::max(milliseconds(0), left));
  }

 private:
  FakeJob* job_;
};

}  // namespace

FakeRuntime::FakeRuntime(FakeJob* job, RuntimeInfo info)
    : job_(job),
      info_(info),
      current_(info),
      registry_(info.epoch),
      store_(std::make_unique<JobStore>(job)) {
  std::lock_guard<std::mutex> lock(job_->mu_);
  job_->runtimes_.push_back(this);
}

FakeRuntime::~FakeRuntime() {
  std::lock_guard<std::mutex> lock(job_->mu_);
  auto& all = job_->runtimes_;
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

RuntimeInfo FakeRuntime::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

uint64_t FakeRuntime::Subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_[next_token_] = std::move(listener);
  return next_token_++;
}

void FakeRuntime::Unsubscribe(uint64_t token) {
  std::lock_guard<std::mutex> delivering(deliver_mu_);  // not while a listener runs
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(token);
}

void FakeRuntime::OnFailure(Listener callback) { (void)Subscribe(std::move(callback)); }

std::optional<FailureEvent> FakeRuntime::PollEvent() { return std::nullopt; }

Status FakeRuntime::ReportStep(uint64_t) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  return Status::Ok();
}

Status FakeRuntime::ReportDeviceError(const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  device_errors_.push_back(detail);
  return Status::Ok();
}

uint64_t FakeRuntime::steps_reported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

std::vector<std::string> FakeRuntime::device_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_errors_;
}

Status FakeRuntime::KvPut(const std::string& key, const std::string& value) {
  return job_->Put(key, value);
}

StatusOr<std::string> FakeRuntime::KvGet(const std::string& key, milliseconds timeout) {
  return job_->Get(key, timeout);
}

// As the agent runtime delivers it: the communicators of older epochs first, then the listeners.
void FakeRuntime::Deliver(const FailureEvent& e) {
  if (!e.shutdown) registry_.Advance(e.epoch);
  std::lock_guard<std::mutex> delivering(deliver_mu_);
  std::vector<Listener> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.epoch >= current_.epoch) {
      current_.epoch = e.epoch;
      if (e.world_size > 0) current_.world_size = e.world_size;
    }
    for (const auto& [token, l] : listeners_) listeners.push_back(l);
  }
  for (const Listener& l : listeners) l(e);
}

std::unique_ptr<FakeRuntime> FakeJob::Rank(int rank, RuntimeRole role) {
  RuntimeInfo info;
  info.role = role;
  info.rank = rank;
  info.world_size = world_;
  info.epoch = epoch();
  info.slot = rank;
  return std::make_unique<FakeRuntime>(this, info);
}

uint64_t FakeJob::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

void FakeJob::Deliver(FailureEvent e) {
  std::vector<FakeRuntime*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e.epoch = ++epoch_;
    all = runtimes_;
  }
  e.world_size = world_;
  for (FakeRuntime* r : all) {
    e.rank = r->info().rank;
    r->Deliver(e);
  }
}

void FakeJob::Fail(const std::vector<int>& failed) {
  FailureEvent e;
  e.failed_ranks = failed;
  e.reason = "a test's failure";
  Deliver(e);
}

void FakeJob::Shutdown(const std::vector<int>& failed, bool checkpoint_first) {
  FailureEvent e;
  e.failed_ranks = failed;
  e.reason = "a test's shutdown";
  e.shutdown = true;
  e.checkpoint_first = checkpoint_first;
  Deliver(e);
}

Status FakeJob::Put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_[key] = value;
  cv_.notify_all();
  return Status::Ok();
}

StatusOr<std::string> FakeJob::Get(const std::string& key, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::min(timeout, milliseconds(3600 * 1000)),
                    [&] { return kv_.count(key) > 0; }))
    return Status::DeadlineExceeded("KV key '" + key + "' not set");
  return kv_[key];
}

}  // namespace rtft::protect::test
