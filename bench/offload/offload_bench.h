// `rtft-bench offload`: the optimizer-offload benchmark of docs/benchmarks.md ("Optimizer
// offload"). Declared here rather than in bench_command.h so the subcommand lives in its own files.
#pragma once

#include <memory>

#include "bench/common/bench_command.h"

namespace rtft::bench {

std::unique_ptr<BenchCommand> NewOffloadCommand();

}  // namespace rtft::bench
