// `rtft-bench comm`: rt-ft's communicators against the same collective called directly (Gloo's
// own ring all-reduce, or NCCL), in real processes of one `mpirun --enable-recovery dp-launch`
// job; then, per size, a job whose rank 1 is SIGKILLed (agent and application) in the middle of
// an all-reduce: how long the survivors' calls take to return (abort_ms, from the earlier of the
// kill and the failure event) and how long until the next epoch's communicator, with a spare in
// the lost rank's place, is ready on every rank (rebuild_ms, from the failure event). Targets
// (docs/comm.md): busbw at least 0.95 of direct at 64 MiB and up, abort_ms <= 50 (CPU machine),
// rebuild_ms <= 1000 at 4 ranks.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewCommCommand();

}  // namespace rtft::bench
