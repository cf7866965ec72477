// CUDA errors are classified by what the caller must do (core/device_error.h): a sticky error is
// kDeviceLost with the way out in its message, out of memory is kResourceExhausted, a missing
// driver or device is kFailedPrecondition, and only the rest is kInternal. Runs without a GPU: it
// uses CUDA's error values, which core/cuda_status.h holds to CUDA's headers.
#include "core/device_error.h"

#include <gtest/gtest.h>

namespace rtft {
namespace {

TEST(DeviceError, StickyErrorsAreADeviceLost) {
  for (int sticky :
       {cuda_error::kIllegalAddress, cuda_error::kLaunchFailure, cuda_error::kEccUncorrectable,
        cuda_error::kHardwareStackError, cuda_error::kIllegalInstruction,
        cuda_error::kMisalignedAddress, cuda_error::kAssert, cuda_error::kUnknown}) {
    Status s = CudaErrorToStatus(sticky, "D2H copy: some error");
    EXPECT_EQ(s.code(), StatusCode::kDeviceLost) << sticky;
    EXPECT_TRUE(IsStickyCudaError(sticky)) << sticky;
    EXPECT_NE(s.message().find("D2H copy: some error"), std::string::npos) << s;
    EXPECT_NE(s.message().find("Runtime::ReportDeviceError"), std::string::npos) << s;
  }
  EXPECT_STREQ(StatusCodeName(StatusCode::kDeviceLost), "DEVICE_LOST");
}

TEST(DeviceError, OtherErrorsSayWhatElseToDo) {
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kMemoryAllocation, "m").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kNoDevice, "m").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kInsufficientDriver, "m").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kDevicesUnavailable, "m").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kTimeout, "m").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CudaErrorToStatus(cuda_error::kInvalidValue, "m").code(), StatusCode::kInternal);
  EXPECT_FALSE(IsStickyCudaError(cuda_error::kMemoryAllocation));
  EXPECT_FALSE(IsStickyCudaError(cuda_error::kInvalidValue));
}

}  // namespace
}  // namespace rtft
