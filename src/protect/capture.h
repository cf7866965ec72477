// The L1 capture worker: one named thread for the Protector's whole life, on which each step's
// copy of the state into its snapshot area runs while forward and backward run on the training
// thread (docs/protect.md, "Levels"). The fence before the update waits for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/thread.h"
#include "protect/snapshot.h"

namespace rtft::protect {

class Capturer {
 public:
  // What ran on the worker after a capture that succeeded (hands the step to the replicator).
  using Done = std::function<void(uint64_t step)>;
  struct Job {
    uint64_t step = 0;
    uint64_t epoch = 0;
    int rank = 0;
    int world = 1;
    std::string objects;  // serialized on the training thread, as they were at the step's start
    const void* stream = nullptr;  // the application's CUDA stream, for device tensors
    Done done;
  };
  static StatusOr<std::unique_ptr<Capturer>> Start(Snapshot* l1);
  ~Capturer();  // finishes a capture in flight, then joins

  // Begins a capture; the one before must have been waited for.
  Status Begin(Job job);
  // Until the capture in flight is over: its status (Ok when none was begun since the last wait).
  Status Wait();

 private:
  explicit Capturer(Snapshot* l1) : l1_(l1) {}
  void Run();

  Snapshot* l1_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // the capture to run
  bool busy_ = false;       // begun and not yet over
  bool stop_ = false;
  Status status_;
  Thread thread_;
};

}  // namespace rtft::protect
