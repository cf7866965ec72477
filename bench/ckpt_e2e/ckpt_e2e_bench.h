// `rtft-bench ckpt-e2e`: what checkpointing costs a training run end to end, as DataStates-LLM
// reports it: rtft-train's mean iteration time with an rt-ft checkpoint every N steps (only those
// steps protected, their L3 version written from the snapshot in the background), with the same
// state written from the training thread every N steps (the torch.save-like baseline), and with
// no checkpoint, the three variants interleaved over repeats (docs/benchmarks.md).
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewCkptE2eCommand();

}  // namespace rtft::bench
