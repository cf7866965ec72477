// The CPU seconds of this process's threads by name, for the "done" line that `rtft-bench
// protect` reads (docs/benchmarks.md, "A node's budget"): which of the protection's threads
// (rt-ft names its own, docs/architecture.md) spend what.
#pragma once

#include <map>
#include <string>

namespace train {

// The CPU time (user and system) of each live thread of this process, summed by thread name
// (/proc/self/task/*/stat). A thread that has ended is not counted: the process's total, from
// getrusage, is the sum plus the ended threads'. Empty where /proc cannot be read.
std::map<std::string, double> ThreadCpuSeconds();

// "name:seconds,name:seconds,..." (milliseconds precision), names with every character outside
// [A-Za-z0-9_./-] replaced by '_'.
std::string FormatThreadCpu(const std::map<std::string, double>& by_name);

}  // namespace train
