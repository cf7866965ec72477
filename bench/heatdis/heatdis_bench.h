// `rtft-bench heatdis`: what protection costs the heat-diffusion solver (examples/heatdis) and what
// it saves when a slot is lost. Overhead: rtft-heatdis --bench-blocks alternates blocks of
// protected and unprotected steps of K iterations in one run; fields name ("heatdis"), phase
// ("overhead"), program, ranks, rows, cols, protect_every, iterations, repeats, iter_s_on,
// iter_s_off (medians), overhead_pct (median of the runs' ratios) and its _runs, cpu_overhead_pct
// (rank 0's CPU time per iteration, every thread of it) and its _runs, target_pct (3), met (by
// overhead_pct). Recovery: slot 1 lost (its dp-launch SIGKILLed) at an iteration, a spare takes its
// rank, against checkpoint-restart of the same job (killed whole there, started again from its
// newest L3 version); fields phase ("recovery"), fail_iteration, l3_every, recovered_s (the kill to
// the first step run again), resumed_s (to the lost iteration done again), reexecuted_iterations,
// restart_s, restart_reexecuted_iterations, speedup (restart_s / resumed_s), target 5x, met.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewHeatdisCommand();

}  // namespace rtft::bench
