// The default size of the pinned pool (RTFT_CKPT_POOL_BYTES=0), chosen once per engine from the
// node: an eighth of its memory per local rank. The rest of a rank's share is left to what else
// lives in host memory: the hot swap's L1 snapshots (twice the state) and the optimizer offload's
// state. A pool of the state's size lets Checkpoint() finish capturing without waiting for the
// disk; a smaller one makes the update wait for (state - pool) / disk bandwidth.
#pragma once

#include <cstdint>
#include <string>

namespace rtft {

struct PoolSizing {
  uint64_t bytes = 0;       // the pool
  uint64_t host_bytes = 0;  // the node's memory (or the cgroup's limit, when lower)
  int local_ranks = 1;
  std::string local_ranks_from;  // which setting or probe gave local_ranks
};

// Never below two chunks per flush thread (the disk would idle) nor above 64 GiB (pinning takes
// time at engine creation), a whole number of chunks.
PoolSizing DefaultPoolSize(uint64_t chunk_bytes, int flush_threads);

}  // namespace rtft
