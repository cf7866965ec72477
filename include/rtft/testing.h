// Test hooks (docs/testing.md, "Named fault points"): an application places named points in its
// own step, so that a test can make one of its processes fail at a known phase (the middle of
// forward/backward, say) instead of after a random delay, as it can at the library's own points.
#pragma once

#include "rtft/export.h"

namespace rtft {

// Reaching `point` armed by RTFT_FAULT="point[@n][:action],..." (read at start) or ArmFaults()
// fails this process as armed: kill, stop, hang or exit=N, the n-th time it is reached, after
// appending a line to RTFT_FAULT_LOG. Unarmed (the default), it costs one atomic load.
RTFT_EXPORT void FaultPoint(const char* point);

// Arms the named points of `spec` (the syntax of RTFT_FAULT; empty disarms every point) in place
// of what was armed before, with their counts from zero: how a test arms one process of a job,
// chosen at run time, without writing the environment.
RTFT_EXPORT void ArmFaults(const char* spec);

}  // namespace rtft
