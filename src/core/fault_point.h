// Named fault points: places in the library where a test can make a process fail on purpose, at a
// known phase instead of after a random delay (docs/testing.md lists the points). RTFT_FAULT
// arms them: "point[@n][:action][,...]" fires at the n-th time (default 1) this process reaches
// `point`, with action kill (SIGKILL itself), stop (SIGSTOP itself), hang (block forever),
// wait=PATH (block the calling thread until PATH exists), exit=N, repeat=F (no failure:
// FaultRepeats() then asks the caller to do its work F times on average, a slow rank) or flag /
// flags (no failure: FaultFlag() says when to corrupt, once or from then on); "S/point..."
// arms it only in the first process started on slot S (RTFT_SLOT, with RTFT_RESTART_COUNT 0), so a
// job-wide RTFT_FAULT can aim at one rank. ArmFaults() replaces what is armed. Before acting it
// appends "fault <point> <action> pid=<pid> slot=<RTFT_SLOT> t=<us>" to RTFT_FAULT_LOG (or stderr),
// so a test can wait for the phase. Unarmed (the default), a point costs one atomic load.
#pragma once

#include "rtft/testing.h"  // declares rtft::FaultPoint, exported for applications' own points
