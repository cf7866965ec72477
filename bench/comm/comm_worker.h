// The rank side of `rtft-bench comm`: what one process of the benchmark's job measures
// (comm_bench.h runs the jobs and reads what the ranks logged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "rtft/comm.h"

namespace rtft::bench {

struct CommWorkerOptions {
  std::string mode;  // bw | fail | single | shrink
  CommBackend backend = CommBackend::kGloo;
  std::vector<uint64_t> bytes;
  int rounds = 3;
  std::string dir;  // where each slot logs
  int victim = 1;
  std::string victim_fault;
  int gpus = 1;                        // NCCL: rank r uses GPU r % gpus
  std::string shrink_path = "revoke";  // shrink mode: revoke (+ shrink) or abort (shrink only)
};

// Runs inside the job (under dp-launch); returns the process exit code.
int RunCommWorker(const CommWorkerOptions& options);

}  // namespace rtft::bench
