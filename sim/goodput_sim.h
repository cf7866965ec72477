// The discrete-event simulation behind `rtft-bench goodput` (docs/goodput.md): one long training
// job under a Poisson failure process, run either by rt-ft (per-step protection, a spare pool,
// checkpoint-and-exit when the spares run out, L3 when both holders of a replica are lost) or by
// plain checkpoint-restart (every failure ends the job; it is started again from its newest
// checkpoint). Pure: no clock, no I/O, deterministic for a given seed. goodput_bench.cc turns
// measured figures into SimParams; the unit test checks the results against closed forms.
#pragma once

#include <cstdint>

#include "rtft/status.h"

namespace rtft::bench::goodput {

// Every duration in seconds; "work" is failure-free, unprotected training time.
struct SimParams {
  int nodes = 0;                   // active nodes; each failure takes one node's processes
  double work_s = 0;               // the job's training work, failure-free and unprotected
  double failures_per_node_h = 0;  // Poisson rate of failures per active node and hour
  double transient_fraction = 0;   // share of failures that are process crashes (rest: nodes)
  double step_s = 0;               // one unprotected training step
  // Persistent (L3) checkpoints, the same engine for both policies.
  double ckpt_blocking_s = 0;  // training held per checkpoint
  double ckpt_write_s = 0;     // snapshot to committed (in the background)
  double ckpt_load_s = 0;      // reading the newest version back
  // rt-ft.
  double protect_overhead = 0;      // a protected step takes (1 + overhead) step_s
  double rtft_detect_crash_s = 0;   // a crashed process seen by its agent
  double rtft_detect_node_s = 0;    // a lost node seen by the heartbeat timeout
  double rtft_recover_crash_s = 0;  // detection to the step started again, crash
  double rtft_recover_node_s = 0;   // the same with a spare (transfer included)
  double rtft_l3_interval_s = 0;    // work between rt-ft's L3 versions
  int spares = 0;                   // spare nodes of the job
  double repair_h = 0;              // mean time until a lost node can be a spare again
  // After a swap, until the spare holds its replicas again: losing a ring neighbour of the
  // swapped node then loses both holders of a shard.
  double replica_rebuild_s = 0;
  // Checkpoint-restart.
  double restart_detect_crash_s = 0;  // a crashed process ends the job (launcher)
  double restart_detect_node_s = 0;   // a lost node: the survivors wait for the timeout
  double relaunch_s = 0;              // scheduler and processes
  double startup_s = 0;               // CUDA, NCCL, data loaders
  double restart_interval_s = 0;      // work between checkpoints (set by the interval search)
  // A job not done after this many failure-free wall times is given up (finished = false).
  double give_up_factor = 10;
};

// InvalidArgument naming the first field out of range (NaN and infinity included).
Status Validate(const SimParams& p);

enum class Policy { kRtft, kRestart };
const char* PolicyName(Policy policy);

struct JobResult {
  bool finished = false;
  double wall_s = 0;          // start to the last step done
  double work_done_s = 0;     // work completed (work_s when finished)
  double failure_free_s = 0;  // the same policy's wall time without failures
  double lost_s = 0;          // wall_s - failure_free_s: what the failures cost
  int failures = 0, crashes = 0, node_losses = 0;
  int spare_swaps = 0;
  int spares_exhausted = 0;   // rt-ft: checkpoint-and-exit, then a relaunch
  int both_holders_lost = 0;  // rt-ft: rolled back to L3
  int checkpoints = 0;        // L3 versions committed
  double ettr() const { return wall_s > 0 ? work_done_s / wall_s : 0; }
};

// One job. The failure times, kinds and nodes depend on the seed alone, so both policies meet
// the same failures for the same seed (the one that runs longer meets more of them).
StatusOr<JobResult> SimulateJob(const SimParams& p, Policy policy, uint64_t seed);

// The policy's wall time without failures: the work, protected for rt-ft, and the blocking of
// every checkpoint (one per interval of work, none at the very end).
double FailureFreeWallSeconds(const SimParams& p, Policy policy);

// Mean time between failures of the whole job, seconds (infinity without failures).
double JobMtbfSeconds(const SimParams& p);

}  // namespace rtft::bench::goodput
