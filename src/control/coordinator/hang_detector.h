// The primary's hang detector (docs/protect.md, "Hangs"): from what every heartbeat carries (the
// rank's last step and its application's progress sample: calls of its watched communicators,
// whether one is under way and which peer it waits on, a long phase, the sample's age), it finds
// a rank that stopped while its peers wait for it, within max(min, k x the median step time).
// Pure logic over the times it is given (tested alone, hang_detector_test); the primary feeds it
// on its event loop and turns a verdict into a failure of kind kHang.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "control/wire/types.h"

namespace rtft::control {

struct HangOptions {
  // A rank is hung when its peers have waited for it past max(min, k x the median step time of
  // the last steps) while it made no progress. 0: no detection (the agents' watchdog remains).
  int32_t k = 10;
  std::chrono::milliseconds min{2000};
  // The bound while no median is known (the job's first steps, those after a recovery or a
  // shrink) and while a rank is in a long phase (an L3 write's wait).
  std::chrono::milliseconds first_step{60000};
};

class HangDetector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HangDetector(const HangOptions& options) : o_(options) {}

  bool enabled() const { return o_.k > 0; }
  // A new epoch of `world` ranks began at `now` (the start, a recovery, a shrink, a takeover):
  // what was known of the ranks is forgotten, the step times too (the first steps after a
  // recovery are not steps like the others).
  void Reset(int32_t world, Clock::time_point now);
  // A heartbeat of the slot holding `rank`: its step and progress sample.
  void Observe(LogicalRank rank, uint64_t step, const CallProgress& progress,
               Clock::time_point now);

  struct Verdict {
    std::vector<LogicalRank> ranks;  // the hung ones
    std::string why;                 // what was seen, for the log
  };
  // The ranks found hung now, if any. One verdict per epoch: the next comes after Reset.
  // `gathering`: the ranks waiting in one of the coordinator's gathers of this epoch (a
  // recovery's agreement): they wait on the others, like a rank inside a collective, and are
  // never the culprit themselves.
  std::optional<Verdict> Check(Clock::time_point now,
                               const std::vector<LogicalRank>& gathering = {});

  // The bound a rank's peers must have waited past (first_step while no median is known or a
  // rank is in a long phase).
  std::chrono::milliseconds Bound() const;
  // The median of the recent step times, when enough are known.
  std::optional<double> MedianStepMs() const;

 private:
  struct Rank {
    bool seen = false;     // a heartbeat of this epoch came
    bool sampled = false;  // ... with a progress sample
    uint64_t step = 0;
    bool step_moved = false;  // its step changed in this epoch (step_at is a step's start)
    Clock::time_point step_at{};
    uint64_t calls = 0;
    bool in_call = false;
    int32_t peer = -1;
    bool long_phase = false;
    int64_t age_ms = -1;  // the sample's age when its heartbeat came (at age_at)
    Clock::time_point age_at{};
    Clock::time_point moved_at{};  // its step, calls or call state last changed
    // The sample's age at `now`: a heartbeat's age is already old when it is read, and an
    // application that stopped sampling ages between heartbeats (-1: no sample).
    int64_t AgeAt(Clock::time_point now) const;
  };
  std::string Describe(LogicalRank r, Clock::time_point now) const;

  HangOptions o_;
  std::vector<Rank> ranks_;
  std::deque<double> step_ms_;  // the recent step times, newest last
  Clock::time_point epoch_at_{};
  bool decided_ = false;
};

}  // namespace rtft::control
