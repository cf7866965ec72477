// `rtft-bench detect --sim`: the control plane at scale (docs/benchmarks.md, "rtft-bench
// detect"). One real coordinator and 64..4096 simulated agents in this process, each a real
// CURVE DEALER socket speaking the real protocol, multiplexed over a few driver threads (4096
// AgentClients would mean 4096 threads and ZeroMQ contexts on a 2-core machine). Reports the
// coordinator's heartbeat CPU cost, the detection latency of a killed agent and the time to
// announce the new epoch to every agent, as JSON lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "bench/common/bench_util.h"

namespace rtft::bench {

struct DetectSimOptions {
  std::vector<uint64_t> agents = {64, 256, 1024, 4096};
  std::chrono::milliseconds heartbeat_period{100};
  std::chrono::milliseconds heartbeat_timeout{1000};
  double window_s = 3.0;  // steady-state heartbeat measurement
  int driver_threads = 2;
};

// Runs the simulation for every agent count; one JSON line each.
Status RunDetectSim(const DetectSimOptions& options, JsonLines* out);

}  // namespace rtft::bench
