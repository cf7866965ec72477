// What this process is doing, for the coordinator's hang detector (docs/protect.md, "Hangs"): the
// calls of its watched communicators (each begun call counted, whether one is under way and
// which peer it waits on) and whether a phase longer than a step is under way (an L3 write's
// wait). Written by the calls as they go (a few relaxed atomics, no lock, no message); read by
// the runtime's thread once per heartbeat period, which sends the sample to the slot's agent.
#pragma once

#include <atomic>
#include <cstdint>

namespace rtft {

struct ProgressSample {
  uint64_t calls = 0;       // calls begun on watched communicators, since the process started
  bool in_call = false;     // one of them is under way
  int32_t peer = -1;        // the job rank that call waits on (a receive or a send); -1: none
  bool long_phase = false;  // a phase longer than a step (LongPhase) is under way
};

class ProgressMonitor {
 public:
  // The process's monitor.
  static ProgressMonitor& Get();

  void BeginCall() {
    calls_.fetch_add(1, std::memory_order_relaxed);
    depth_.fetch_add(1, std::memory_order_relaxed);
  }
  void EndCall() { depth_.fetch_sub(1, std::memory_order_relaxed); }
  // The call waits on job rank `peer` until Waited().
  void Wait(int32_t peer) { peer_.store(peer, std::memory_order_relaxed); }
  void Waited() { peer_.store(-1, std::memory_order_relaxed); }
  void BeginLongPhase() { long_.fetch_add(1, std::memory_order_relaxed); }
  void EndLongPhase() { long_.fetch_sub(1, std::memory_order_relaxed); }

  ProgressSample Sample() const;

 private:
  std::atomic<uint64_t> calls_{0};
  std::atomic<int32_t> depth_{0};
  std::atomic<int32_t> peer_{-1};
  std::atomic<int32_t> long_{0};
};

// Marks a scope that may take longer than a step, so that its peers waiting for this rank do not
// count as a hang (the detector then allows RTFT_HANG_FIRST_STEP_S).
class LongPhase {
 public:
  LongPhase() { ProgressMonitor::Get().BeginLongPhase(); }
  ~LongPhase() { ProgressMonitor::Get().EndLongPhase(); }
  LongPhase(const LongPhase&) = delete;
  LongPhase& operator=(const LongPhase&) = delete;
};

// A watched call's wait on one peer (nothing when `peer` is negative: the call is not watched).
class WaitingOn {
 public:
  explicit WaitingOn(int32_t peer) : on_(peer >= 0) {
    if (on_) ProgressMonitor::Get().Wait(peer);
  }
  ~WaitingOn() {
    if (on_) ProgressMonitor::Get().Waited();
  }
  WaitingOn(const WaitingOn&) = delete;
  WaitingOn& operator=(const WaitingOn&) = delete;

 private:
  const bool on_;
};

}  // namespace rtft
