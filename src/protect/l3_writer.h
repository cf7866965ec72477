// L3 (docs/protect.md, "Levels"): the checkpoint engine that writes a step's L1 snapshot to the
// parallel file system every K steps (or on demand), straight from L1 memory. The writer owns
// the engine of the current epoch; at an epoch's end the engine is retired (its commits
// abandoned: a commit waiting for a lost rank's file ends at once) and destroyed on the writer's
// own named thread, off recovery's path, joined before the next retirement and by the destructor,
// which waits for the current engine's versions to be committed. A recovery opens the next
// engine on a thread of its own too (its pool and I/O rings took 50-130 ms of a crash's
// recovery on two cores): the first call that needs it waits for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/thread.h"
#include "rtft/checkpoint.h"

namespace rtft::protect {

class L3Writer {
 public:
  // `dir` empty: no L3. `every` 0: only on demand (CheckpointNow, checkpoint-and-exit).
  L3Writer(std::string dir, uint64_t every, std::chrono::milliseconds commit_timeout);
  ~L3Writer();

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  bool Due(uint64_t step) const { return every_ > 0 && step > 0 && step % every_ == 0; }
  // An engine for this rank of `world` (the one before retired first); `state_bytes` sizes its
  // pool unless RTFT_CKPT_POOL_BYTES does. In the background: made on a thread, its error
  // reported (and logged once) by the first call that needs it; Open returns at once.
  enum class When { kNow, kInBackground };
  Status Open(int rank, int world, uint64_t state_bytes, uint64_t epoch, When when = When::kNow);
  // An engine is open or being opened.
  bool open() const { return engine_ != nullptr || opener_.running(); }
  void Retire();

  // Starts writing `step` from `view`, with `marks` in its manifests; the engine copies out of
  // L1 in the background.
  Status Write(uint64_t step, const StateProvider& view, const VersionMarks& marks = {});
  // The capture of `step` overwrites the area of step - 2: waits until the engine copied it.
  void BeforeCapture(uint64_t step);
  // Until the version in flight is copied out of L1 (nothing in flight: Ok).
  Status WaitCopied();
  Status WaitPersisted(uint64_t step);
  std::optional<uint64_t> pending() const { return pending_; }

  // A recovery into `epoch` went back to `after_step` (docs/protect.md, "Recovery"), rank 0: the
  // complete versions after it (the steps the job runs again; after a faulty device, state the
  // replays do not vouch for: `why` says which) are withdrawn: their MANIFEST.json removed, so
  // they are incomplete (pruned later, or written again), and LATEST, where it names no complete
  // version any more, moved back to the newest complete one (removed when there is none). At once,
  // and again on the retirement thread once the engines retired before are gone (one of them may
  // still commit a version after the first pass); a version `epoch`'s engines wrote (their write
  // id) is never withdrawn. Logged; an error is logged and changes nothing else.
  void Withdraw(uint64_t after_step, uint64_t epoch, const std::string& why);
  // A job started again from an older version than LATEST (RTFT_PROTECT_RESUME_FROM), rank 0,
  // before the first epoch's communicators, so before any rank writes: the same withdrawal, once,
  // whatever wrote the versions (an earlier run's epochs are this run's numbers too).
  void WithdrawBeforeStart(uint64_t after_step, const std::string& why) {
    WithdrawNow(after_step, std::nullopt, why);
  }

  // The options of an engine that writes rank `rank`'s files.
  // `epoch`: the job's epoch, the write of every version this engine writes (write_id).
  CheckpointOptions Options(int rank, int world, uint64_t state_bytes, uint64_t epoch) const;

 private:
  const std::string dir_;
  const uint64_t every_;
  const std::chrono::milliseconds commit_timeout_;
  // The engine being opened in the background, once there is one: its outcome is taken by Ready().
  Status Ready();

  std::unique_ptr<CheckpointEngine> engine_;
  std::optional<uint64_t> pending_;  // the version whose copy out of L1 may be running
  Thread opener_;
  // Written by opener_, read after it is joined.
  std::unique_ptr<CheckpointEngine> opened_;
  Status open_status_;
  Thread retirement_;
  // `own_write`: the write id whose versions stay (none: every version after the step goes).
  void WithdrawNow(uint64_t after_step, std::optional<uint64_t> own_write,
                   const std::string& why) const;
};

}  // namespace rtft::protect
