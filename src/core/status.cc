#include "rtft/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rtft {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
#define RTFT_STATUS_CODE(id, name, value, what) \
  case StatusCode::id:                          \
    return #name;
#include "rtft/enum_list.h"
#undef RTFT_STATUS_CODE
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

Status Status::FromErrno(int err, const std::string& context) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFound(msg);
    case EEXIST:
      return AlreadyExists(msg);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhausted(msg);
    case EROFS:
    case EACCES:
    case EPERM:
      return PermissionDenied(msg);
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR:
      return InvalidArgument(msg);
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return Unavailable(msg);
    case ETIMEDOUT:
      return DeadlineExceeded(msg);
    case ENOSYS:
    case EOPNOTSUPP:
      return Unimplemented(msg);
    default:
      return IoError(msg);
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::Annotate(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

namespace internal {

void StatusOrValueMissing(const Status& status, const char* file, int line,
                          const void* caller) noexcept {
  // stderr without the logger: this runs in whatever state the caller's bug left the process.
  if (file != nullptr) {
    std::fprintf(stderr, "rt-ft: %s:%d: StatusOr::value() on an error: %s\n", file, line,
                 status.ToString().c_str());
  } else {
    std::fprintf(stderr,
                 "rt-ft: StatusOr dereferenced on an error (caller at %p; addr2line names it): "
                 "%s\n",
                 caller, status.ToString().c_str());
  }
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal
}  // namespace rtft
