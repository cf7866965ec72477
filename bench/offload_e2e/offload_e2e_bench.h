// `rtft-bench offload-e2e`: what offloading the optimizer costs a training run end to end:
// rtft-train --device cuda's mean iteration time with the optimizer's state resident on the GPU
// (the ceiling), with it in pinned host memory updated interleaved on the GPU and the CPU
// (--offload), and updated on the CPU only (--offload --offload-mode cpu), the same model, batch
// and GPU memory budget, the three variants interleaved over repeats (docs/benchmarks.md).
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewOffloadE2eCommand();

}  // namespace rtft::bench
