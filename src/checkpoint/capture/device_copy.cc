#include "checkpoint/capture/device_copy.h"
#include "core/build_config.h"

#include <string>

#include "core/logging.h"

#if RTFT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda_status.h"
#endif

namespace rtft {

#if RTFT_WITH_CUDA
namespace {

class CudaTicket : public CopyTicket {
 public:
  explicit CudaTicket(cudaEvent_t event) : event_(event) {}
  ~CudaTicket() override { cudaEventDestroy(event_); }
  Status Wait() override {
    return CudaStatus(cudaEventSynchronize(event_), "waiting for a device copy");
  }

 private:
  cudaEvent_t event_;
};

class CudaCopier : public DeviceCopier {
 public:
  CudaCopier(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaCopier() override {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }

  StatusOr<std::unique_ptr<CopyTicket>> CopyToHost(const std::vector<CopyPiece>& pieces) override {
    RTFT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "selecting device"));
    for (const CopyPiece& p : pieces) {
      RTFT_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(p.dst, p.src, p.bytes, cudaMemcpyDeviceToHost, stream_), "D2H copy"));
    }
    return RecordTicket();
  }

  Status After(const void* stream) override {
    RTFT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "selecting device"));
    cudaEvent_t event;
    RTFT_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event"));
    cudaError_t err = cudaEventRecord(event, static_cast<cudaStream_t>(const_cast<void*>(stream)));
    if (err == cudaSuccess) err = cudaStreamWaitEvent(stream_, event, 0);
    cudaEventDestroy(event);  // released once the wait is done with it
    return CudaStatus(err, "ordering a copy after the application's stream");
  }

  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    RTFT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "selecting device"));
    RTFT_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "H2D copy"));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> done, RecordTicket());
    return done->Wait();
  }

  StatusOr<std::unique_ptr<CopyTicket>> CopyToDeviceAsync(void* dst, const void* src,
                                                          size_t bytes) override {
    RTFT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "selecting device"));
    RTFT_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "H2D copy"));
    return RecordTicket();
  }

 private:
  // A ticket for everything enqueued on the stream so far. Its wait blocks the thread (blocking
  // sync) instead of spinning on a core through the copy, as cudaStreamSynchronize and events
  // without the flag do: a capture's copy of gigabytes takes tens of milliseconds per step.
  StatusOr<std::unique_ptr<CopyTicket>> RecordTicket() {
    cudaEvent_t event;
    RTFT_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync),
                   "creating an event"));
    cudaError_t err = cudaEventRecord(event, stream_);
    if (err != cudaSuccess) {
      cudaEventDestroy(event);
      return CudaStatus(err, "recording an event");
    }
    return std::unique_ptr<CopyTicket>(new CudaTicket(event));
  }

  int device_;
  cudaStream_t stream_;
};

}  // namespace

bool CudaDevicePresent() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

StatusOr<std::unique_ptr<DeviceCopier>> CreateDeviceCopier(int device) {
  int n = 0;
  // After a sticky error this fails too, and says so: a lost device, not a missing one.
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&n), "counting CUDA devices"));
  if (n == 0) return Status::FailedPrecondition("no CUDA device is present");
  RTFT_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(device), "selecting device " + std::to_string(device)));
  cudaStream_t stream;
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                  "creating a copy stream"));
  return std::unique_ptr<DeviceCopier>(new CudaCopier(device, stream));
}

Status CheckDevicePointer(const void* ptr, int device, const std::string& what) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  // After a sticky error every call fails: that is a lost device, not a wrong pointer.
  if (err != cudaSuccess && IsStickyCudaError(static_cast<int>(err)))
    return CudaStatus(err, what + ": checking its pointer");
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::InvalidArgument(what + ": CUDA does not know its pointer (" +
                                   cudaGetErrorString(err) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return Status::InvalidArgument(what + " is described as device memory, but its pointer is " +
                                   "host memory");
  if (attr.device != device)
    return Status::InvalidArgument(what + " is described as on device " + std::to_string(device) +
                                   " but lives on device " + std::to_string(attr.device));
  return Status::Ok();
}

bool RegisterHostMemory(void* base, size_t bytes, size_t piece_bytes) {
  if (!CudaDevicePresent()) return false;
  for (size_t off = 0; off < bytes; off += piece_bytes) {
    size_t n = std::min(piece_bytes, bytes - off);
    cudaError_t err = cudaHostRegister(static_cast<char*>(base) + off, n, cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      RTFT_LOG(kWarn, kLogCkpt) << "cudaHostRegister of " << n << " bytes failed ("
                                << cudaGetErrorString(err) << "); D2H copies will be slower";
      UnregisterHostMemory(base, off, piece_bytes);
      cudaGetLastError();
      return false;
    }
  }
  return true;
}

void UnregisterHostMemory(void* base, size_t bytes, size_t piece_bytes) {
  for (size_t off = 0; off < bytes; off += piece_bytes)
    cudaHostUnregister(static_cast<char*>(base) + off);
}

#else  // !RTFT_WITH_CUDA

bool CudaDevicePresent() { return false; }

StatusOr<std::unique_ptr<DeviceCopier>> CreateDeviceCopier(int device) {
  return Status::Unimplemented("device memory given, but this rt-ft was built without CUDA");
}

Status CheckDevicePointer(const void*, int, const std::string& what) {
  return Status::Unimplemented(what +
                               " is in device memory, but this rt-ft was built without CUDA");
}

bool RegisterHostMemory(void*, size_t, size_t) { return false; }
void UnregisterHostMemory(void*, size_t, size_t) {}

#endif

}  // namespace rtft
