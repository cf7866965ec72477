// A faulting kernel for the device-error test (out_of_bounds.cu).
#pragma once

#include <cuda_runtime.h>

namespace rtft::testing {

// Launches a kernel that writes out of bounds of `p`; returns the launch's error (normally
// cudaSuccess: the fault shows at the next synchronization).
cudaError_t LaunchOutOfBoundsWrite(float* p);

}  // namespace rtft::testing
