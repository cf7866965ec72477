// The protect layer sits after runtime: compiled as part of the runtime layer this must fail (the
// runtime does not see the Protector's internals), as part of the protect layer it must build.
#include "protect/protector.h"

int RtftProtectLayeringProbe() { return 0; }
