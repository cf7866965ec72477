// `rtft-bench goodput`: long training jobs at 1K-16K GPUs simulated from a failure model and
// measured figures (goodput_sim.h), rt-ft against checkpoint-restart at its best interval:
// ETTR, the failure-induced lost time and their ratio, with every input and where it came from,
// and a sensitivity sweep (docs/goodput.md). Target: lost_ratio 0.05 or less at 16K GPUs.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewGoodputCommand();

}  // namespace rtft::bench
