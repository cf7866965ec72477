// `rtft-bench protect`: what per-step protection costs. The trainer (rtft-train, next to
// rtft-bench) runs on 4 active slots and a spare under `mpirun --enable-recovery dp-launch`,
// the same model and steps with and without L1 + L2 (--no-protect), alternated over repeats; the
// figure is the median of each run's mean step time. Target (docs/protect.md): 3% or less.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewProtectCommand();

}  // namespace rtft::bench
