// The C API's statuses and last-error message (include/rtft/rtft.h, "Status"), and the checks
// every call makes of what a C caller hands in.
#include <cstring>

#include "capi/handles.h"
#include "core/build_config.h"
#include "rtft/testing.h"

namespace rtft::capi {
namespace {

// The C constants are generated into rtft.h from rtft/enum_list.h (scripts/gen-enums.sh, checked
// by a test); the compiler checks them against the list too.
#define RTFT_STATUS_CODE(id, name, value, what) \
  static_assert(RTFT_##name == -(value) && static_cast<int>(StatusCode::id) == (value));
#define RTFT_DTYPE(id, name, value, bytes, text) \
  static_assert(RTFT_##name == (value) && static_cast<int>(DType::id) == (value));
#define RTFT_REDUCE_OP(id, name, value, text) \
  static_assert(RTFT_##name == (value) && static_cast<int>(ReduceOp::id) == (value));
#define RTFT_COMM_BACKEND(id, name, value, text) \
  static_assert(RTFT_BACKEND_##name == (value) && static_cast<int>(CommBackend::id) == (value));
#define RTFT_RUNTIME_ROLE(id, name, value, meaning) \
  static_assert(RTFT_ROLE_##name == (value) && static_cast<int>(RuntimeRole::id) == (value));
#define RTFT_RUN_OUTCOME(id, name, value, meaning) \
  static_assert(RTFT_RUN_##name == (value) && static_cast<int>(RunOutcome::id) == (value));
#include "rtft/enum_list.h"
#undef RTFT_STATUS_CODE
#undef RTFT_DTYPE
#undef RTFT_REDUCE_OP
#undef RTFT_COMM_BACKEND
#undef RTFT_RUNTIME_ROLE
#undef RTFT_RUN_OUTCOME

thread_local std::string last_error;

}  // namespace

rtft_status_t Record(const Status& s) noexcept {
  if (s.ok()) return RTFT_OK;
  try {
    last_error = s.ToString();
  } catch (...) {
    last_error.clear();  // out of memory: the code still says what happened
  }
  return -static_cast<int>(s.code());
}

Status FromC(rtft_status_t code, const std::string& what) {
  if (code == RTFT_OK) return Status::Ok();
  if (code < 0 && -code <= static_cast<int>(kLastStatusCode))
    return Status(static_cast<StatusCode>(-code),
                  what + " returned " + StatusCodeName(static_cast<StatusCode>(-code)));
  return Status::Internal(what + " returned " + std::to_string(code) + ", not an rtft_status_t");
}

Status NotNull(const void* p, const char* what) {
  return p ? Status::Ok() : Status::InvalidArgument(std::string(what) + " is NULL");
}

// The values a C caller may pass: those of the lists.
Status CheckDType(int dtype, DType* out) {
  switch (dtype) {
#define RTFT_DTYPE(id, name, value, bytes, text) \
  case value:                                    \
    *out = DType::id;                            \
    return Status::Ok();
#include "rtft/enum_list.h"
#undef RTFT_DTYPE
  }
  return Status::InvalidArgument("dtype " + std::to_string(dtype) + " is not an rtft_dtype_t");
}

Status CheckReduceOp(int op, ReduceOp* out) {
  switch (op) {
#define RTFT_REDUCE_OP(id, name, value, text) \
  case value:                                 \
    *out = ReduceOp::id;                      \
    return Status::Ok();
#include "rtft/enum_list.h"
#undef RTFT_REDUCE_OP
  }
  return Status::InvalidArgument("op " + std::to_string(op) + " is not an rtft_reduce_op_t");
}

Status CheckBackend(int backend, CommBackend* out) {
  switch (backend) {
#define RTFT_COMM_BACKEND(id, name, value, text) \
  case value:                                    \
    *out = CommBackend::id;                      \
    return Status::Ok();
#include "rtft/enum_list.h"
#undef RTFT_COMM_BACKEND
  }
  return Status::InvalidArgument("backend " + std::to_string(backend) +
                                 " is not an rtft_backend_t");
}

Status CheckName(const char* name, size_t max, const char* what) {
  RTFT_RETURN_IF_ERROR(NotNull(name, what));
  const size_t n = strnlen(name, max + 1);
  if (n == 0 || n > max)
    return Status::InvalidArgument(std::string(what) + ": 1 to " + std::to_string(max) +
                                   " bytes expected");
  return Status::Ok();
}

Status CheckOptionsSize(size_t size, size_t first, size_t known, const char* type) {
  if (size >= first && size <= RTFT_OPTIONS_MAX_SIZE) return Status::Ok();
  return Status::InvalidArgument(
      std::string(type) + ".size is " + std::to_string(size) + ": " +
      (size < first ? "smaller than any version of it (" + std::to_string(first) + " bytes)"
                    : "larger than any options struct (RTFT_OPTIONS_MAX_SIZE)") +
      "; set it with " + type + "_init (this library's is " + std::to_string(known) + " bytes)");
}

Status CheckUnknownFieldsZero(const void* options, size_t size, size_t known, const char* type) {
  const auto* bytes = static_cast<const unsigned char*>(options);
  for (size_t i = known; i < size; ++i) {
    if (bytes[i] != 0)
      return Status::Unimplemented(
          std::string(type) + " sets a field that librt-ft " + RTFT_VERSION_STRING +
          " does not know (byte " + std::to_string(i) + " of " + std::to_string(size) +
          "; its struct has " + std::to_string(known) +
          "): run with the librt-ft whose rtft.h the program was built with");
  }
  return Status::Ok();
}

}  // namespace rtft::capi

using rtft::Status;
using rtft::capi::Call;

extern "C" {

const char* rtft_last_error(void) { return rtft::capi::last_error.c_str(); }

const char* rtft_version(void) { return RTFT_VERSION_STRING; }

rtft_status_t rtft_fault_point(const char* name) {
  return Call([&] {
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(name, 256, "rtft_fault_point: name"));
    rtft::FaultPoint(name);
    return Status::Ok();
  });
}

int rtft_fault_flag(const char* name) {
  if (!rtft::capi::CheckName(name, 256, "rtft_fault_flag: name").ok()) return 0;
  return rtft::FaultFlag(name) ? 1 : 0;
}

}  // extern "C"
