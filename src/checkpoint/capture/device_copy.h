// Device-to-host and host-to-device copies for capture and restore, on a dedicated CUDA stream
// per device so they overlap the application's compute. Builds without CUDA compile this to
// stubs that report Unimplemented for device memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft {

// True when this build has CUDA and the machine has at least one device.
bool CudaDevicePresent();

struct CopyPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// A batch of asynchronous copies; Wait() returns once all of them are complete.
class CopyTicket {
 public:
  virtual ~CopyTicket() = default;
  virtual Status Wait() = 0;
};

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  // Enqueues device-to-host copies on this copier's stream and returns at once.
  virtual StatusOr<std::unique_ptr<CopyTicket>> CopyToHost(
      const std::vector<CopyPiece>& pieces) = 0;
  // Makes the copies enqueued from now on wait for the work already queued on `stream` (a
  // cudaStream_t of the application; null: the legacy default stream), which the copier's own
  // non-blocking stream would not wait for.
  virtual Status After(const void* stream) = 0;
  // Synchronous host-to-device copy (restore).
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Enqueues one host-to-device copy on this copier's stream and returns at once; `src` must
  // stay valid and unchanged until the ticket's Wait() returns (streamed restore).
  virtual StatusOr<std::unique_ptr<CopyTicket>> CopyToDeviceAsync(void* dst, const void* src,
                                                                  size_t bytes) = 0;
};

// OK when `ptr` is device (or managed) memory of CUDA device `device`; InvalidArgument naming
// `what` otherwise, so a wrongly described tensor fails at Checkpoint(), not inside a copy.
Status CheckDevicePointer(const void* ptr, int device, const std::string& what);

// One copier per device ordinal, with its own non-blocking stream.
StatusOr<std::unique_ptr<DeviceCopier>> CreateDeviceCopier(int device);

bool RegisterHostMemory(void* base, size_t bytes, size_t piece_bytes);
void UnregisterHostMemory(void* base, size_t bytes, size_t piece_bytes);

}  // namespace rtft
