// `rtft-bench recovery`: a process crash and a lost slot at a step of rtft-train, each against
// checkpoint-restart of the same job; fields name ("recovery"), failure, slots, step_s, detect_s,
// resumed_s (from the failure until the step that was running completes again),
// reexecuted_steps, restart_s and speedup (restart_s / resumed_s). Targets (docs/protect.md):
// a crash detected in 50 ms or less, resumed in 1.5 s, 10x; a lost slot detected within 1.5x the
// heartbeat timeout, resumed within the detection plus 1.5 s, 5x; at most one step again.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewRecoveryCommand();

}  // namespace rtft::bench
