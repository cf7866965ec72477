// `rtft-bench comm --sim`: the Gloo backend's rendezvous at N ranks, the ranks threads of this
// process meeting through an in-process store that counts what passes through it. Per N and per
// RTFT_COMM_GLOO_PAIRS setting (all: every pair at creation; ring: the two neighbours, the
// barrier's partners at the first barrier): the creation's time, the first barrier's, and the
// store's operations and bytes per rank (docs/comm.md, "Gloo at scale"). One machine's threads
// stand in for N hosts: the times include their contention for its cores, the counts do not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "rtft/status.h"

namespace rtft::bench {

struct CommSimOptions {
  std::vector<uint64_t> ranks;     // e.g. 16, 64, 256
  std::vector<std::string> pairs;  // "all", "ring"
  int repeats = 3;                 // the times are medians of these runs
};

// One JSON line per (ranks, pairs): name "comm_rendezvous".
Status RunCommSim(const CommSimOptions& o, JsonLines* out);

}  // namespace rtft::bench
