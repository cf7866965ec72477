// The C API's handles (include/rtft/rtft.h) and the glue every call shares: a C++ result turned
// into an rtft_status_t with its message kept for rtft_last_error(), no exception let out, and
// the C callbacks' statuses turned back into rtft::Status. Only src/capi/ includes it.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rtft/checkpoint.h"
#include "rtft/comm.h"
#include "rtft/protect.h"
#include "rtft/rtft.h"
#include "rtft/runtime.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft::capi {

// A state described through the C API: tensors by pointer, objects by callback.
class CState final : public StateProvider {
 public:
  Status Describe(StateDescription* out) const override;
  Status Restored() const override;
  // Adds `tensor` or `object` unless the description would then be invalid (a name used twice,
  // a shard outside its tensor): the caller hears of it at the call that caused it.
  Status Add(TensorDesc tensor);
  Status Add(ObjectDesc object);
  void OnRestored(rtft_restored_fn fn, void* user) { restored_ = {fn, user}; }

 private:
  StateDescription state_;
  std::pair<rtft_restored_fn, void*> restored_{nullptr, nullptr};
};

// Records `s` for rtft_last_error() when it is an error, and returns its C code.
rtft_status_t Record(const Status& s) noexcept;
// Runs `body` (returning a Status) for the C caller: its status, or kInternal for an exception.
template <typename F>
rtft_status_t Call(F&& body) noexcept {
  try {
    return Record(body());
  } catch (const std::exception& e) {
    return Record(Status::Internal(std::string("exception in rt-ft: ") + e.what()));
  } catch (...) {
    return Record(Status::Internal("exception in rt-ft"));
  }
}
// The status a C callback returned, as a Status naming `what`.
Status FromC(rtft_status_t code, const std::string& what);
// InvalidArgument "`what` is NULL" unless `p` is set.
Status NotNull(const void* p, const char* what);
Status CheckDType(int dtype, DType* out);
Status CheckReduceOp(int op, ReduceOp* out);
Status CheckBackend(int backend, CommBackend* out);
// A NUL-terminated name of at most `max` bytes.
Status CheckName(const char* name, size_t max, const char* what);

// ---- Options that grow (rtft.h): a struct whose first field is its size ----
// `size` for a struct of `type` whose first version was `first` bytes and whose version here is
// `known` bytes: InvalidArgument when it is below `first` or above RTFT_OPTIONS_MAX_SIZE.
Status CheckOptionsSize(size_t size, size_t first, size_t known, const char* type);
// The extra bytes of a newer caller's struct: Unimplemented unless all are zero.
Status CheckUnknownFieldsZero(const void* options, size_t size, size_t known, const char* type);

// Fills `size` bytes at `options` with `defaults` (zeros past this library's struct), size set.
template <typename T>
Status InitOptions(T* options, size_t size, size_t first, T defaults, const char* type) {
  RTFT_RETURN_IF_ERROR(NotNull(options, type));
  RTFT_RETURN_IF_ERROR(CheckOptionsSize(size, first, sizeof(T), type));
  defaults.size = size;
  std::memcpy(options, &defaults, std::min(size, sizeof(T)));
  if (size > sizeof(T))
    std::memset(reinterpret_cast<char*>(options) + sizeof(T), 0, size - sizeof(T));
  return Status::Ok();
}

// `defaults` with the fields that the caller's `options` covers copied over it; only
// options->size bytes of `options` are read.
template <typename T>
Status ReadOptions(const T* options, size_t first, T* defaults, const char* type) {
  const size_t size = options->size;  // the first field: every version has it
  RTFT_RETURN_IF_ERROR(CheckOptionsSize(size, first, sizeof(T), type));
  RTFT_RETURN_IF_ERROR(CheckUnknownFieldsZero(options, size, sizeof(T), type));
  std::memcpy(defaults, options, std::min(size, sizeof(T)));
  defaults->size = sizeof(T);
  return Status::Ok();
}

}  // namespace rtft::capi

struct rtft_runtime {
  std::unique_ptr<rtft::Runtime> runtime;
};

struct rtft_state {
  std::shared_ptr<rtft::capi::CState> state;
  // Handed to a resize callback: rt-ft owns it, rtft_state_destroy refuses it.
  bool borrowed = false;
};

struct rtft_bytes {
  std::string data;
};

struct rtft_ckpt {
  std::unique_ptr<rtft::CheckpointEngine> engine;
};

// A communicator of its own (rtft_comm_create), or the protector's training communicator of the
// current epoch, looked up at each call (it is replaced at every recovery).
struct rtft_comm {
  std::unique_ptr<rtft::Communicator> owned;
  rtft::Protector* protector = nullptr;
  rtft::Communicator* get() const { return owned ? owned.get() : protector->comm(); }
};

struct rtft_protector {
  std::unique_ptr<rtft::Protector> protector;
  rtft_comm comm;  // the borrowed handle of rtft_protector_comm and the step context
  std::shared_ptr<rtft::capi::CState> state;
};
