// The control plane's coordinator: compiled in the bench room this must fail (rtft-bench reaches
// the control plane only through sim/: bench/CMakeLists.txt), in the sim room it must build.
#include "control/coordinator/coordinator.h"

int RtftControlLayeringProbe() { return 0; }
