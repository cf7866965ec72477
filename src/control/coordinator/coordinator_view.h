// What other threads see of the coordinator: its membership, counters, error and the job's end,
// under one mutex. The coordinator's event loop writes it; the public accessors of
// CoordinatorImpl (coordinator_impl.h) read it from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include "control/coordinator/coordinator.h"
#include "control/net/zmq_util.h"

namespace rtft::control {

// The role's fields of CoordinatorStats, as the loop last published them.
struct RoleStats {
  bool primary = false;
  bool fenced = false;
  Generation generation = 0;
  SlotId standby_slot = -1;
  bool synced = false;
  uint64_t takeovers = 0;
};

class CoordinatorView {
 public:
  // Readers (any thread).
  Membership membership() const;
  CoordinatorStats stats() const;
  Status error() const;
  bool primary() const;
  bool fenced() const;
  int WaitJobEnd();
  std::optional<int> WaitJobEndFor(std::chrono::milliseconds timeout);

  // Writers (the loop's thread).
  void CountMessage(MsgType type);
  void CountRejectedMessage();
  // The ZAP handler refused `refused` more peers; `closed` connections were closed so far.
  void CountRefusedPeers(uint64_t refused, uint64_t closed);
  void SetThreadCpu(double seconds);
  void Publish(const Membership& m, const RoleStats& role);
  // The epoch the coordinator starts with, declared and sent now.
  void StartEpoch(uint64_t epoch);
  // A new epoch, declared at `declared`, was queued for every agent just now.
  void EpochSent(uint64_t epoch, SteadyClock::time_point declared);
  // The job is over with `code` (the first code stands).
  void EndJob(int code);
  // The loop's thread ended with `s`: the job ends with exit code 1.
  void Fail(const Status& s);
  // A newer primary took over, or this one stepped down: the job ends with exit code 1 here.
  void Fence();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership snapshot_;
  CoordinatorStats stats_;
  std::optional<int> job_code_;
  bool fenced_ = false;
  Status error_;  // what ended the thread
};

}  // namespace rtft::control
