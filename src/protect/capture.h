// The L1 capture worker: one named thread for the Protector's whole life, on which each step's
// copy of the state into its snapshot area runs while forward and backward run on the training
// thread (docs/protect.md, "Levels"). The fence before the update waits for the copy; the next
// step's begin for the whole capture (its checksums computed after the copy of device state).
// The step goes to the replicator as soon as it is copied, with a future of its sealing: L2 sends
// the bytes while they are still being hashed, and the checksum after them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/thread.h"
#include "protect/snapshot.h"

namespace rtft::protect {

class Capturer {
 public:
  // What the capture is over with: its status, set once the area is sealed (Ok) or the capture
  // failed. Never left unset: a capture cut short by an exception sets its error.
  using Sealed = std::shared_future<Status>;
  // Runs on the worker once the state of `step` is in its area (before its checksums, for device
  // state): hands the step to the replicator.
  using Copied = std::function<void(uint64_t step, Sealed sealed)>;
  struct Job {
    uint64_t step = 0;
    uint64_t epoch = 0;
    int rank = 0;
    int world = 1;
    std::string objects;  // serialized on the training thread, as they were at the step's start
    const void* stream = nullptr;  // the application's CUDA stream, for device tensors
    Copied copied;
  };
  static StatusOr<std::unique_ptr<Capturer>> Start(Snapshot* l1);
  ~Capturer();  // finishes a capture in flight, then joins

  // Begins a capture; the one before must have been waited for.
  Status Begin(Job job);
  // Until the capture in flight is over: its status (Ok when none was begun since the last wait).
  Status Wait();
  // Until the capture in flight has copied the state (it may change from there on: the fence
  // before the update), or is over: Ok, or the status it failed with. Its checksums may still be
  // in the making: Wait() before the snapshot is read or the next capture begun.
  Status WaitCopied();

 private:
  explicit Capturer(Snapshot* l1) : l1_(l1) {}
  void Run();

  Snapshot* l1_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // the capture to run
  bool busy_ = false;       // begun and not yet over
  bool copied_ = false;     // the state of the capture in flight is in the snapshot
  bool stop_ = false;
  Status status_;
  Thread thread_;
};

}  // namespace rtft::protect
