// The one helper that turns a cudaError_t into rt-ft's Status (core/device_error.h classifies
// it), for every layer's CUDA code (checkpoint capture, comm/nccl, offload's GPU path,
// rtft-bench's GPU helpers); included only by sources built with RTFT_WITH_CUDA, the rest of
// core knows no CUDA. Every CUDA call goes through it, so a sticky error is kDeviceLost
// everywhere, never "a bug in rt-ft" nor a retryable one.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/device_error.h"
#include "rtft/status.h"

namespace rtft {

// Core names CUDA's errors by value; these hold it to CUDA's own.
static_assert(cuda_error::kInvalidValue == cudaErrorInvalidValue);
static_assert(cuda_error::kMemoryAllocation == cudaErrorMemoryAllocation);
static_assert(cuda_error::kInitializationError == cudaErrorInitializationError);
static_assert(cuda_error::kCudartUnloading == cudaErrorCudartUnloading);
static_assert(cuda_error::kInsufficientDriver == cudaErrorInsufficientDriver);
static_assert(cuda_error::kDevicesUnavailable == cudaErrorDevicesUnavailable);
static_assert(cuda_error::kNoDevice == cudaErrorNoDevice);
static_assert(cuda_error::kEccUncorrectable == cudaErrorECCUncorrectable);
static_assert(cuda_error::kNvlinkUncorrectable == cudaErrorNvlinkUncorrectable);
static_assert(cuda_error::kIllegalAddress == cudaErrorIllegalAddress);
static_assert(cuda_error::kLaunchTimeout == cudaErrorLaunchTimeout);
static_assert(cuda_error::kContextIsDestroyed == cudaErrorContextIsDestroyed);
static_assert(cuda_error::kAssert == cudaErrorAssert);
static_assert(cuda_error::kHardwareStackError == cudaErrorHardwareStackError);
static_assert(cuda_error::kIllegalInstruction == cudaErrorIllegalInstruction);
static_assert(cuda_error::kMisalignedAddress == cudaErrorMisalignedAddress);
static_assert(cuda_error::kInvalidAddressSpace == cudaErrorInvalidAddressSpace);
static_assert(cuda_error::kInvalidPc == cudaErrorInvalidPc);
static_assert(cuda_error::kLaunchFailure == cudaErrorLaunchFailure);
static_assert(cuda_error::kSystemNotReady == cudaErrorSystemNotReady);
static_assert(cuda_error::kSystemDriverMismatch == cudaErrorSystemDriverMismatch);
static_assert(cuda_error::kTimeout == cudaErrorTimeout);
static_assert(cuda_error::kExternalDevice == cudaErrorExternalDevice);
static_assert(cuda_error::kUnknown == cudaErrorUnknown);
#if CUDART_VERSION >= 12040
static_assert(cuda_error::kContained == cudaErrorContained);
#endif

// OK for cudaSuccess; otherwise the classified Status, "<what>: <name> (<text>)". A non-sticky
// error is also cleared from the thread's last-error slot, so the next call does not see it.
inline Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  if (!IsStickyCudaError(static_cast<int>(err))) (void)cudaGetLastError();
  return CudaErrorToStatus(static_cast<int>(err), what + ": " + cudaGetErrorName(err) + " (" +
                                                      cudaGetErrorString(err) + ")");
}

}  // namespace rtft
