// The baselines of `rtft-bench comm`: the same all-reduce through Gloo's own algorithm
// (gloo::allreduce, ring, on a gloo::rendezvous::Context) or through NCCL directly (a blocking
// communicator of its own), in the same processes and on the same buffers as rt-ft's.
#pragma once

#include <memory>
#include <string>

#include "rtft/comm.h"

namespace rtft::bench {

class DirectAllReduce {
 public:
  virtual ~DirectAllReduce() = default;
  // Sums `count` floats of `send` into `recv` (host memory for Gloo, device memory for NCCL)
  // and returns when the result is there.
  virtual Status Run(const float* send, float* recv, size_t count) = 0;
};

// Meets the other ranks through `store` under keys that start with `prefix`.
StatusOr<std::unique_ptr<DirectAllReduce>> NewDirectAllReduce(CommBackend backend, int rank,
                                                              int world, CommStore* store,
                                                              const std::string& prefix,
                                                              int device);

}  // namespace rtft::bench
