// The primary's straggler detector (docs/protect.md, "Stragglers"): from the own work per step
// that every heartbeat carries (a rank's step time outside the watched communicators' calls,
// summed over the steps since its agent's last heartbeat), it finds a rank whose work over the
// last `window` steps is slower than the median of its peers' by more than `percent`. Its peers
// are the ranks that do the same work: on a tensor x pipeline grid (dp-launch --grid), the other
// data-parallel replicas of its (t, p) place, never another stage. A rank's
// work is the median of its heartbeats' means over the window (at least kMinSamples of them), so
// a burst (the rank descheduled once, a page-cache flush) does not make it slow, and it must stay
// past the threshold at every check for a further window of its steps before it is named, so a
// rank that the scheduler leaves behind for a while is not swapped for it. Pure logic
// over what it is given (tested alone, straggler_detector_test); the primary feeds it on its
// event loop and turns a verdict into a planned swap when a spare is free, a report otherwise.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "control/wire/types.h"

namespace rtft::control {

struct StragglerOptions {
  // A rank is a straggler when its work per step over its last `window` steps exceeds the median
  // of its peers' by more than `percent` %, and goes on doing so at every check for `window`
  // more of its steps. 0: no detection.
  int32_t percent = 20;
  int32_t window = 50;  // steps
  // ... and for at least this long of its own work past the threshold (the steps past it times its
  // work per step): with steps of milliseconds, a window of steps is under a second, which the
  // scheduler of a busy host can hold a rank back for without the rank being slow.
  double min_past_ms = 5000;
};

class StragglerDetector {
 public:
  // Heartbeats a window holds at least, whatever its steps.
  static constexpr size_t kMinSamples = 5;

  explicit StragglerDetector(const StragglerOptions& options) : o_(options) {}

  bool enabled() const { return o_.percent > 0 && o_.window > 0; }
  // A new epoch of `world` ranks, laid out t + T * (d + D * p) on a `tensor` x `pipeline` grid
  // (1 x 1: every rank is every other's peer): the work seen so far is forgotten (a recovery's
  // first steps are not steps like the others, and the ranks may live on other slots now).
  void Reset(int32_t world, int32_t tensor = 1, int32_t pipeline = 1);
  // A heartbeat of the slot holding `rank`: its work since the heartbeat before.
  void Observe(LogicalRank rank, const StepWork& work);

  struct Verdict {
    LogicalRank rank = kNoRank;
    double work_ms = 0;         // its work per step over its window
    double peers_ms = 0;        // the median of the other ranks'
    std::vector<double> ranks;  // every rank's (ms), by rank, for the log
    std::string why;            // the line for the log
  };
  // The slowest rank that stayed past the threshold for a further window, once every rank has a
  // full window; nothing otherwise.
  // A rank is named once per epoch (the primary swaps it, or reports it once).
  std::optional<Verdict> Check();

 private:
  struct Rank {
    std::deque<StepWork> samples;        // newest last; their steps cover the window, or just over
    uint64_t steps = 0;                  // the samples' sum
    uint64_t total = 0;                  // its steps observed in this epoch
    std::optional<uint64_t> over_since;  // `total` when it was first seen past the threshold
  };
  // The median of a full window's heartbeat means (ms per step); nothing before it is full.
  std::optional<double> Work(const Rank& r) const;

  StragglerOptions o_;
  std::vector<Rank> ranks_;
  std::vector<int64_t> group_;  // by rank: its (t, p) place; peers share it
  std::vector<bool> named_;     // named in this epoch
  bool changed_ = false;        // work came since the last Check
};

}  // namespace rtft::control
