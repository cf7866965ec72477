// The baselines of `rtft-bench comm`: the same all-reduce through Gloo's own algorithm
// (gloo::allreduce, ring, on a gloo::rendezvous::Context) or through NCCL directly (a blocking
// communicator of its own), in the same processes and on the same buffers as rt-ft's.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "rtft/comm.h"

namespace rtft::bench {

class DirectAllReduce {
 public:
  virtual ~DirectAllReduce() = default;
  // Sums `count` floats of `send` into `recv` (host memory for Gloo, device memory for NCCL)
  // `times` times, back to back, and returns when the last result is there (NCCL: `times`
  // launches on the stream, then one synchronization, as nccl-tests measures).
  virtual Status Run(const float* send, float* recv, size_t count, int times) = 0;
};

// Meets the other ranks through `store` under keys that start with `prefix`. `nonblocking`
// (NCCL): a non-blocking NCCL communicator, polled after every call, instead of a blocking one.
StatusOr<std::unique_ptr<DirectAllReduce>> NewDirectAllReduce(CommBackend backend, int rank,
                                                              int world, CommStore* store,
                                                              const std::string& prefix, int device,
                                                              bool nonblocking = false);

// NCCL's own way to go on without a lost rank (the `shrink` policy without a new unique id;
// docs/comm.md): a non-blocking communicator of `world` ranks all-reduces `bytes` until rank
// `victim` stops at the fault point "bench.shrink.victim" and its slot is killed; each survivor,
// at the failure event (`event_us` turns non-zero), makes the communicator without the victim,
// either revoking it (ncclCommRevoke, NCCL 2.28) and shrinking it (ncclCommShrink), or shrinking
// it with NCCL_SHRINK_ABORT (2.27) alone, then checks one all-reduce on the result. `log` gets
// one line: `shrink revoke_ms= shrink_ms= check_ms= world=` (from the event).
Status NcclShrinkProbe(int rank, int world, int victim, size_t bytes, bool revoke, CommStore* store,
                       const std::string& prefix, int device,
                       const std::atomic<long long>& event_us,
                       const std::function<void(const std::string&)>& log);

}  // namespace rtft::bench
