// A job of in-process ranks for the Protector's unit tests: each rank a FakeRuntime over one
// key-value store that the job shares, and failure events delivered to every runtime the way
// dp-launch's coordinator delivers them (the communicators of the old epoch aborted first).
// Ranks are threads; the Gloo communicators they make connect over loopback.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rtft/runtime.h"

namespace rtft::protect::test {

class FakeJob;

class FakeRuntime final : public Runtime {
 public:
  FakeRuntime(FakeJob* job, RuntimeInfo info);
  ~FakeRuntime() override;

  const RuntimeInfo& info() const override { return info_; }
  RuntimeInfo current() const override;
  uint64_t Subscribe(Listener listener) override;
  void Unsubscribe(uint64_t token) override;
  void OnFailure(Listener callback) override;
  std::optional<FailureEvent> PollEvent() override;
  Status ReportStep(uint64_t step) override;
  Status ReportDeviceError(const std::string& detail) override;
  Status KvPut(const std::string& key, const std::string& value) override;
  StatusOr<std::string> KvGet(const std::string& key, std::chrono::milliseconds timeout) override;
  CommStore* comm_store() override { return store_.get(); }
  AbortRegistry* abort_registry() override { return &registry_; }

  // The event as the coordinator would send it to this rank.
  void Deliver(const FailureEvent& e);
  uint64_t steps_reported() const;
  std::vector<std::string> device_errors() const;

 private:
  FakeJob* job_;
  const RuntimeInfo info_;
  mutable std::mutex mu_;
  std::mutex deliver_mu_;  // held while listeners run
  RuntimeInfo current_;
  std::map<uint64_t, Listener> listeners_;
  uint64_t next_token_ = 1;
  uint64_t steps_ = 0;
  std::vector<std::string> device_errors_;
  EpochAbortRegistry registry_;
  std::unique_ptr<CommStore> store_;
};

class FakeJob {
 public:
  explicit FakeJob(int world) : world_(world) {}

  // A runtime for `rank` in the job's current epoch (a spare or a restarted process after Fail).
  std::unique_ptr<FakeRuntime> Rank(int rank, RuntimeRole role = RuntimeRole::kInitial);
  // A failure: the next epoch, the same ranks (a spare or a restart takes `failed`), delivered to
  // every runtime of the job.
  void Fail(const std::vector<int>& failed);
  // The job ends: a shutdown event, asking for a checkpoint first or not.
  void Shutdown(const std::vector<int>& failed, bool checkpoint_first);
  uint64_t epoch() const;
  int world() const { return world_; }

  Status Put(const std::string& key, const std::string& value);
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  friend class FakeRuntime;
  void Deliver(FailureEvent e);

  const int world_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t epoch_ = 1;
  std::map<std::string, std::string> kv_;
  std::vector<FakeRuntime*> runtimes_;
};

}  // namespace rtft::protect::test
