// The C API is the last layer: compiled as part of the protect layer this must fail (nothing
// below it sees its handles), as part of the capi layer it must build.
#include "capi/handles.h"

int RtftCapiLayeringProbe() { return 0; }
