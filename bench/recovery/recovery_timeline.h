// What `rtft-bench recovery` reads off rtft-train's timestamped lines (docs/protect.md,
// "Measured"): the wall time of a line, the stages of a recovery, and one failure's figures.
#pragma once

#include <string>

namespace rtft::bench {

// The first `[train R] ...` line matching `pattern` (one capture group at most besides t): its
// wall time in seconds, or -1.
double FirstTime(const std::string& out, const std::string& pattern, std::string* group = nullptr);

// What a recovery moved (every rank counts what it sent) and how long its stages took (the
// slowest rank's, from the failure event).
struct Stages {
  double bytes_moved = 0, agree_s = 0, rebuild_s = 0, transfer_s = 0;
  // --device cuda: the CUDA start-up of the process that took the rank (a spare's comes after
  // its activation, docs/launcher.md "GPUs"; a restarted one's after its restart); -1: not
  // printed (CPU runs, or a trainer without the field).
  double cuda_init_s = -1;
};
// The stages of the `[train R] recovered ...` lines of `output`.
Stages ParseStages(const std::string& output);

// The latest `[train R] recovered ...` line's wall time (the last rank out of the recovery), or -1.
double LastRecovered(const std::string& out);

// One failure's figures, as read off a run. Where resumed_s goes: the replacement's start (the
// restarted process, or the activated spare, has its rank: start_s, from the failure), the last
// rank out of the recovery (recovered_s, from the failure), then the interrupted step run again
// (first_step_s, from there; held to the steps before the failure).
struct Figures {
  double detect_s = 0, resumed_s = 0, step_s = 0;
  double start_s = -1, recovered_s = -1, first_step_s = -1;
  int reexecuted = 0;
  Stages stages;
};

}  // namespace rtft::bench
