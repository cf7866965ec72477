// A kernel with a real bug: it writes far past the end of its buffer. The GPU faults (an illegal
// address), and the CUDA context is lost for the rest of the process.
#include "out_of_bounds.h"

namespace rtft::testing {
namespace {

__global__ void WriteOutOfBounds(float* p) {
  // A terabyte past a small allocation: no mapping there.
  p[(size_t{1} << 40) / sizeof(float)] = 1.0f;
}

}  // namespace

cudaError_t LaunchOutOfBoundsWrite(float* p) {
  WriteOutOfBounds<<<1, 1>>>(p);
  return cudaGetLastError();
}

}  // namespace rtft::testing
