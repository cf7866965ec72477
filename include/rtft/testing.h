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

// How many times the caller should do the work that `point` guards this time: 1, unless the
// point is armed with repeat=F ("point[@n]:repeat=F", F from 1 to 1000, fractions allowed): from
// its n-th reach on, F times on average (1.2: once, four times in five, twice the fifth). How a
// test makes one rank slow without changing its results (rtft-train repeats its local compute);
// the first slowed reach appends a line to RTFT_FAULT_LOG. Unarmed, it costs one atomic load.
RTFT_EXPORT int FaultRepeats(const char* point);

// Whether the fault that `point` guards happens now: true at the n-th reach of a point armed with
// action `flag` ("point[@n]:flag"), and at every reach from the n-th on with `flags`; false
// otherwise (FaultPoint does nothing at such a point). How a test makes an application corrupt
// its own state at a known place (rtft-train flips a bit of a parameter); the first true appends
// a line to RTFT_FAULT_LOG. Unarmed, it costs one atomic load.
RTFT_EXPORT bool FaultFlag(const char* point);

// Arms the named points of `spec` (the syntax of RTFT_FAULT; empty disarms every point) in place
// of what was armed before, with their counts from zero: how a test arms one process of a job,
// chosen at run time, without writing the environment.
RTFT_EXPORT void ArmFaults(const char* spec);

}  // namespace rtft
