// The checkpoint engine's implementation (the public face is rtft::CheckpointEngine in
// include/rtft/checkpoint.h). Pipeline per version:
//
//   Checkpoint() ──> objects serialized (small; a consistent snapshot of step, RNG, ...)
//   kCapturing   ──> capture thread: pool span per unit ──> host copy (capture pool) or
//                    D2H copy (CUDA stream, completion thread)
//                ──> file thread: version dir + HDF5 skeleton (dataset offsets, objects)
//                ──> flush threads, per captured unit: XXH3 per piece, write at dataset offset
//                    (O_DIRECT body, buffered tail), release span
//   kCaptured        every unit is in the pool (WaitCaptured returns); flushing goes on
//   kFinalizing  ──> file thread: manifest (HDF5), fsync, rename, dir fsync
//   kCommitting  ──> commit thread (rank 0): wait for every rank, MANIFEST.json, LATEST, prune
//   kDone            persisted, or failed (version.h)
//
// engine.cc holds the API and bookkeeping, engine_pipeline.cc the background threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/capture/device_copy.h"
#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/layout.h"
#include "checkpoint/pool/pinned_pool.h"
#include "checkpoint/version.h"
#include "core/thread.h"
#include "core/thread_pool.h"
#include "rtft/checkpoint.h"

namespace rtft {

// Options with every default resolved and checked.
StatusOr<CheckpointOptions> ResolveCheckpointOptions(const CheckpointOptions& options);

// Lets tests put a fault-injecting backend under the engine.
StatusOr<std::unique_ptr<CheckpointEngine>> CreateCheckpointEngine(const CheckpointOptions& options,
                                                                   std::unique_ptr<IoBackend> io);

namespace internal {

struct FlushItem {
  std::shared_ptr<Version> version;
  size_t unit = 0;
  PoolSpan span;
  bool skip = false;  // the version failed: release only
};

class Engine : public CheckpointEngine {
 public:
  Engine(CheckpointOptions options, std::unique_ptr<IoBackend> io,
         std::unique_ptr<PinnedPool> pool);
  ~Engine() override;
  Status Start();

  Status Checkpoint(uint64_t version, const StateProvider& state) override {
    return Checkpoint(version, state, VersionMarks{});
  }
  Status Checkpoint(uint64_t version, const StateProvider& state,
                    const VersionMarks& marks) override;
  Status WaitCaptured(uint64_t version) override;
  Status WaitCaptured(uint64_t version, std::chrono::milliseconds timeout) override;
  Status WaitPersisted(uint64_t version) override;
  Status WaitPersisted(uint64_t version, std::chrono::milliseconds timeout) override;
  Status PollError() override;
  void Abandon() override;
  StatusOr<CheckpointStats> Stats(uint64_t version) override;
  const CheckpointOptions& options() const override { return options_; }

 private:
  // engine.cc
  StatusOr<std::shared_ptr<Version>> Plan(uint64_t version, const StateProvider& state);
  Status CopyEarly(Version* v, TensorDesc* t);
  Status WaitFor(uint64_t version, std::chrono::milliseconds timeout, bool persisted);
  StatusOr<DeviceCopier*> Copier(int device);
  // Records the version's first error (and the engine's), under mu_.
  void FailLocked(Version* v, const Status& status);
  // Moves a version to its next stage once its counters say so, under mu_.
  void AdvanceLocked(const std::shared_ptr<Version>& v);
  // Moves a version to `stage` (only ever forward), under mu_.
  void SetStageLocked(Version* v, VersionStage stage);

  // engine_pipeline.cc
  // Runs one background loop. Work items are guarded one by one (RunGuarded, core/thread.h) and
  // fail only their version; should anything escape the loop itself, the engine records it and
  // fails every wait and every later call with it instead of ending the process.
  void RunLoop(const char* name, void (Engine::*loop)());
  void RecordLoopFailure(const Status& status);
  void CaptureLoop();
  void CaptureVersion(const std::shared_ptr<Version>& v);
  // Starts the copy of unit `i` into `span`; once it returns OK the copy owns the span.
  Status StartCopy(const std::shared_ptr<Version>& v, size_t i, const PoolSpan& span);
  void OnUnitCaptured(const std::shared_ptr<Version>& v, size_t unit, PoolSpan span, Status status);
  void CompletionLoop();
  void FlushLoop();
  Status WriteUnit(
      Version* v, const PlannedUnit& unit, const PoolSpan& span,
      std::map<Version*, std::pair<std::unique_ptr<File>, std::unique_ptr<File>>>* files);
  void FileLoop();
  Status CreateFile(Version* v);
  Status FinalizeVersion(Version* v);
  void CommitLoop();

  const CheckpointOptions options_;
  std::unique_ptr<IoBackend> io_;
  std::unique_ptr<PinnedPool> pool_;
  std::unique_ptr<ThreadPool> capture_pool_;
  std::map<int, std::unique_ptr<DeviceCopier>> copiers_;  // guarded by copier_mu_
  std::mutex copier_mu_;

  std::mutex mu_;
  std::condition_variable cv_;  // any change of version state or queue
  bool stopping_ = false;
  std::atomic<bool> abandoned_{false};
  // Held while old versions are pruned: Abandon waits for a prune that runs, and none starts after.
  std::mutex prune_mu_;
  uint64_t last_version_ = 0;
  bool any_version_ = false;
  Status first_error_;
  Status loop_error_;          // a background loop ended by an exception: the engine is unusable
  bool latest_moved_ = false;  // rank 0: this engine moved LATEST, to latest_version_
  uint64_t latest_version_ = 0;
  std::map<uint64_t, std::shared_ptr<Version>> versions_;  // recent versions, for Wait/Stats
  std::deque<std::shared_ptr<Version>> capture_queue_;
  std::deque<FlushItem> flush_queue_;
  struct DeviceWait {
    std::shared_ptr<Version> version;
    size_t unit;
    PoolSpan span;
    std::unique_ptr<CopyTicket> ticket;
  };
  std::deque<DeviceWait> device_queue_;
  enum class FileTask { kCreate, kFinalize };
  std::deque<std::pair<FileTask, std::shared_ptr<Version>>> file_queue_;
  std::deque<std::shared_ptr<Version>> commit_queue_;

  Thread capture_thread_;
  Thread completion_thread_;
  Thread file_thread_;
  Thread commit_thread_;
  std::vector<Thread> flush_threads_;
};

}  // namespace internal
}  // namespace rtft
