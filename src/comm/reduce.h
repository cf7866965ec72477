// The element-wise reductions of the communicators that reduce on the host (Gloo backend), in a
// fixed operand order so that every rank computes the same bits. 16-bit floats are widened to
// fp32, combined and rounded back to nearest even at each step; float32 and float64 are combined
// in their own precision (docs/comm.md).
#pragma once

#include <cstddef>

#include "rtft/comm.h"

namespace rtft::comm {

// out[i] = a[i] op b[i] for i < n. `out` may be `a` or `b`. kAvg combines as kSum (the division
// is DivideBy, once, at the end).
void ReduceInto(DType dtype, ReduceOp op, const void* a, const void* b, void* out, size_t n);
// data[i] /= divisor (integers truncate toward zero).
void DivideBy(DType dtype, void* data, size_t n, int divisor);

}  // namespace rtft::comm
