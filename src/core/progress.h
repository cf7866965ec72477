// What this process is doing, for the coordinator's hang detector (docs/protect.md, "Hangs"): the
// calls of its watched communicators (each begun call counted, whether one is under way and
// which peer it waits on) and whether a phase longer than a step is under way (an L3 write's
// wait). Written by the calls as they go (a few relaxed atomics and a clock read, no lock, no
// message); read by the runtime's thread once per heartbeat period, which sends the sample to the
// slot's agent. The time some watched call was under way is summed too: a step's own work is
// its time outside them (the straggler detector's measure, docs/protect.md "Stragglers").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

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
    if (depth_.fetch_add(1, std::memory_order_relaxed) == 0)
      since_ns_.store(NowNs(), std::memory_order_relaxed);
  }
  void EndCall() {
    if (depth_.fetch_sub(1, std::memory_order_relaxed) == 1)
      in_calls_ns_.fetch_add(NowNs() - since_ns_.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
  }
  // The call waits on job rank `peer` until Waited().
  void Wait(int32_t peer) { peer_.store(peer, std::memory_order_relaxed); }
  void Waited() { peer_.store(-1, std::memory_order_relaxed); }
  void BeginLongPhase() { long_.fetch_add(1, std::memory_order_relaxed); }
  void EndLongPhase() { long_.fetch_sub(1, std::memory_order_relaxed); }

  ProgressSample Sample() const;
  // Nanoseconds during which some watched call was under way, since the process started (calls
  // of several threads at once count once, approximately: a measure, not an account).
  uint64_t InCallNanos() const { return in_calls_ns_.load(std::memory_order_relaxed); }

  static uint64_t NowNs() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }

 private:
  std::atomic<uint64_t> calls_{0};
  std::atomic<int32_t> depth_{0};
  std::atomic<int32_t> peer_{-1};
  std::atomic<int32_t> long_{0};
  std::atomic<uint64_t> since_ns_{0};     // when the outermost call under way began
  std::atomic<uint64_t> in_calls_ns_{0};  // summed when it ends
};

// Nanoseconds the calling thread has waited for a CPU while it could run (the kernel's run
// delay, the second field of /proc/thread-self/schedstat), since it started; nothing where the
// kernel does not say. The straggler detector's measure leaves it out: a host with more busy
// threads than cores does not make a rank slow (docs/protect.md, "Stragglers").
std::optional<uint64_t> ThreadRunDelayNanos();

// Marks a scope that may take longer than a step, so that its peers waiting for this rank do not
// count as a hang (the detector then allows RTFT_HANG_FIRST_STEP_S).
class LongPhase {
 public:
  LongPhase() { ProgressMonitor::Get().BeginLongPhase(); }
  ~LongPhase() { ProgressMonitor::Get().EndLongPhase(); }
  LongPhase(const LongPhase&) = delete;
  LongPhase& operator=(const LongPhase&) = delete;
};

// A wait for the other ranks outside any communicator's call (the job's first communicators being
// made): the hang detector counts this rank as one that waits, as it does a rank inside a watched
// call, so a rank that never comes is named (docs/protect.md, "Hangs").
class WaitingForPeers {
 public:
  WaitingForPeers() { ProgressMonitor::Get().BeginCall(); }
  ~WaitingForPeers() { ProgressMonitor::Get().EndCall(); }
  WaitingForPeers(const WaitingForPeers&) = delete;
  WaitingForPeers& operator=(const WaitingForPeers&) = delete;
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
