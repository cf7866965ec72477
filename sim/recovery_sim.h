// `rtft-bench recovery --sim`: the recovery protocol at scale (docs/benchmarks.md, "rtft-bench
// recovery"). One real coordinator and 64..4096 simulated agents in this process
// (recovery_agents.h); a device error is reported, and every rank of the next epoch runs the
// protocol: the event's delta, its state into the epoch's gather, rank 0's plan (the Protector's
// planner) back to all, the next epoch's communicator keys. Also with two failures 100 ms apart
// and with a failure in the middle of the protocol. JSON lines, the median of --repeats runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"

namespace rtft::bench {

struct RecoverySimOptions {
  std::vector<uint64_t> agents = {64, 256, 1024, 4096};
  std::vector<std::string> cases = {"one", "two", "during"};
  int repeats = 3;
  int driver_threads = 2;
  std::chrono::milliseconds heartbeat_period{100};
  std::chrono::milliseconds heartbeat_timeout{1000};
  std::chrono::milliseconds second_failure_after{100};  // case "two"
  // The coordinator's threads on these CPUs and the simulated agents' on the others this process
  // may use (empty: every thread anywhere). On one machine the agents otherwise take the cores
  // the coordinator would have to itself on slot 0's node.
  std::vector<int> coordinator_cpus;
  // Gloo communicators of the next epoch that meet through a record per ring pair (the L2
  // replication's streams; 0: none, as before the replication went through Gloo's ring pairs).
  int gloo_rings = 2;
};

Status RunRecoverySim(const RecoverySimOptions& options, JsonLines* out);

}  // namespace rtft::bench
