// Compiled as part of the core layer this must fail: core sits below checkpoint, and a layer
// sees only its own headers and those of the layers before it (src/CMakeLists.txt). Compiled as
// part of the checkpoint layer it must succeed, which shows the failure is the layer rule's.
#include "checkpoint/engine.h"

int RtftLayeringProbe() { return 0; }
