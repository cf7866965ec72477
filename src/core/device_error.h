// How rt-ft classifies a CUDA runtime error, by what the caller must do about it (status.h): a
// sticky error means the GPU is gone for this process (kDeviceLost: retire the slot), running
// out of device memory is kResourceExhausted, a machine without a usable driver or device is
// kFailedPrecondition, and only the rest is kInternal, a bug in rt-ft. Core knows no CUDA: the
// error comes as the integer value of its cudaError_t, and the CUDA side
// (core/cuda_status.h) checks at compile time that these values are CUDA's.
#pragma once

#include <string>

#include "rtft/status.h"

namespace rtft {

// cudaError_t values (driver_types.h) that are classified; any other is kInternal.
namespace cuda_error {
constexpr int kInvalidValue = 1;
constexpr int kMemoryAllocation = 2;
constexpr int kInitializationError = 3;
constexpr int kCudartUnloading = 4;
constexpr int kInsufficientDriver = 35;
constexpr int kDevicesUnavailable = 46;
constexpr int kNoDevice = 100;
constexpr int kEccUncorrectable = 214;
constexpr int kNvlinkUncorrectable = 220;
constexpr int kContained = 226;
constexpr int kIllegalAddress = 700;
constexpr int kLaunchTimeout = 702;
constexpr int kContextIsDestroyed = 709;
constexpr int kAssert = 710;
constexpr int kHardwareStackError = 714;
constexpr int kIllegalInstruction = 715;
constexpr int kMisalignedAddress = 716;
constexpr int kInvalidAddressSpace = 717;
constexpr int kInvalidPc = 718;
constexpr int kLaunchFailure = 719;
constexpr int kSystemNotReady = 802;
constexpr int kSystemDriverMismatch = 803;
constexpr int kTimeout = 909;
constexpr int kExternalDevice = 911;
constexpr int kUnknown = 999;
}  // namespace cuda_error

// True for the errors after which nothing on the device works again in this process.
bool IsStickyCudaError(int error);

// The Status for CUDA error `error` (not cudaSuccess); `message` says what failed and CUDA's
// name and text for the error. A kDeviceLost message also says what to do.
Status CudaErrorToStatus(int error, const std::string& message);

}  // namespace rtft
