// Test hooks (docs/testing.md, "Named fault points"): an application places named points in its
// own step, so that a test can make one of its processes fail at a known phase (the middle of
// forward/backward, say) instead of after a random delay, as it can at the library's own points.
#pragma once

#include "rtft/export.h"

namespace rtft {

// Reaching `point` with RTFT_FAULT="point[@n][:action],..." set fails this process as armed:
// kill, stop, hang or exit=N, the n-th time it is reached, after appending a line to
// RTFT_FAULT_LOG. Unarmed (the default), it costs one getenv.
RTFT_EXPORT void FaultPoint(const char* point);

}  // namespace rtft
