#include "core/device_error.h"

namespace rtft {

bool IsStickyCudaError(int error) {
  using namespace cuda_error;
  switch (error) {
    case kEccUncorrectable:
    case kNvlinkUncorrectable:
    case kContained:
    case kIllegalAddress:
    case kLaunchTimeout:
    case kContextIsDestroyed:
    case kAssert:
    case kHardwareStackError:
    case kIllegalInstruction:
    case kMisalignedAddress:
    case kInvalidAddressSpace:
    case kInvalidPc:
    case kLaunchFailure:
    case kExternalDevice:
    // An error the driver cannot name is what a GPU that fell off the bus reports; retiring the
    // slot is the safe answer.
    case kUnknown:
      return true;
    default:
      return false;
  }
}

Status CudaErrorToStatus(int error, const std::string& message) {
  using namespace cuda_error;
  if (IsStickyCudaError(error))
    return Status::DeviceLost(message +
                              "; the GPU is unusable for the rest of this process: report it "
                              "(Runtime::ReportDeviceError) so that a spare takes this rank");
  switch (error) {
    case kMemoryAllocation:
      return Status::ResourceExhausted(message);
    case kInitializationError:
    case kInsufficientDriver:
    case kNoDevice:
    case kSystemNotReady:
    case kSystemDriverMismatch:
      return Status::FailedPrecondition(message);
    case kDevicesUnavailable:
      return Status::Unavailable(message);
    case kTimeout:
      return Status::DeadlineExceeded(message);
    case kCudartUnloading:
      return Status::Aborted(message);
    default:
      return Status::Internal(message);
  }
}

}  // namespace rtft
