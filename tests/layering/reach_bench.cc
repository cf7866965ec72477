// A benchmark's own header: compiled in the sim room this must fail (the simulations see only
// bench/common of bench/: sim/CMakeLists.txt), in the bench room it must build.
#include "bench/goodput/goodput_inputs.h"

int RtftBenchLayeringProbe() { return 0; }
