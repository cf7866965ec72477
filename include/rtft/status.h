// Status and StatusOr: how every rt-ft call reports failure. The code tells the caller how far
// to roll back: retry (kUnavailable), rebuild communicators (kAborted), restore state (kDataLoss),
// give up the GPU and the slot (kDeviceLost).
// No exception crosses the library boundary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "rtft/export.h"

namespace rtft {

// The codes, what each tells the caller and their names: rtft/enum_list.h, the one list that the
// C, Fortran and Python copies are made from.
enum class StatusCode : int {
#define RTFT_STATUS_CODE(id, name, value, what) id = value,
#include "rtft/enum_list.h"
#undef RTFT_STATUS_CODE
};
// The highest code: whoever decodes a code sent by another process accepts 0..kLastStatusCode
// (a test fails when a code is added after it).
inline constexpr StatusCode kLastStatusCode = StatusCode::kShutdown;

RTFT_EXPORT const char* StatusCodeName(StatusCode code);

class [[nodiscard]] RTFT_EXPORT Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) {
    return {StatusCode::kAlreadyExists, std::move(msg)};
  }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status OutOfRange(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) {
    return {StatusCode::kResourceExhausted, std::move(msg)};
  }
  static Status PermissionDenied(std::string msg) {
    return {StatusCode::kPermissionDenied, std::move(msg)};
  }
  static Status DeadlineExceeded(std::string msg) {
    return {StatusCode::kDeadlineExceeded, std::move(msg)};
  }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status DataLoss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status Unimplemented(std::string msg) {
    return {StatusCode::kUnimplemented, std::move(msg)};
  }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status DeviceLost(std::string msg) { return {StatusCode::kDeviceLost, std::move(msg)}; }
  static Status Shutdown(std::string msg) { return {StatusCode::kShutdown, std::move(msg)}; }
  // Maps an errno value to the code that tells the caller what to do about it.
  static Status FromErrno(int err, const std::string& context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", or "OK".
  std::string ToString() const;
  // Prefixes the message with context ("writing rank-0.h5: ..."); no-op on OK.
  Status Annotate(const std::string& context) const;

  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

namespace internal {
// Ends the process: a StatusOr's value was taken while it held `status` (a bug of the caller).
// Prints the status and where the value was asked for (`file`:`line`, or the caller's address when
// the operators * and -> were used: operators cannot take the caller's position).
[[noreturn]] RTFT_EXPORT void StatusOrValueMissing(const Status& status, const char* file, int line,
                                                   const void* caller) noexcept;
}  // namespace internal

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from an OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  template <typename U, typename = std::enable_if_t<std::is_convertible<U&&, T>::value &&
                                                    !std::is_same<std::decay_t<U>, Status>::value &&
                                                    !std::is_same<std::decay_t<U>, T>::value>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // The value. On an error status the process ends with that status and the caller's file and
  // line, in every build: check ok() first wherever an error is possible.
  T& value(const char* file = __builtin_FILE(), int line = __builtin_LINE()) & {
    Check(file, line, nullptr);
    return *value_;
  }
  const T& value(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const& {
    Check(file, line, nullptr);
    return *value_;
  }
  T&& value(const char* file = __builtin_FILE(), int line = __builtin_LINE()) && {
    Check(file, line, nullptr);
    return std::move(*value_);
  }
  T& operator*() & {
    Check(nullptr, 0, __builtin_return_address(0));
    return *value_;
  }
  const T& operator*() const& {
    Check(nullptr, 0, __builtin_return_address(0));
    return *value_;
  }
  T&& operator*() && {
    Check(nullptr, 0, __builtin_return_address(0));
    return std::move(*value_);
  }
  T* operator->() {
    Check(nullptr, 0, __builtin_return_address(0));
    return &*value_;
  }
  const T* operator->() const {
    Check(nullptr, 0, __builtin_return_address(0));
    return &*value_;
  }

 private:
  void Check(const char* file, int line, const void* caller) const {
    if (__builtin_expect(!value_.has_value(), 0))
      internal::StatusOrValueMissing(status_, file, line, caller);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace rtft

#define RTFT_STATUS_CONCAT_INNER_(a, b) a##b
#define RTFT_STATUS_CONCAT_(a, b) RTFT_STATUS_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define RTFT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::rtft::Status rtft_status_ = (expr);        \
    if (!rtft_status_.ok()) return rtft_status_; \
  } while (0)

// `RTFT_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value or returns the Status.
#define RTFT_ASSIGN_OR_RETURN(lhs, expr) \
  RTFT_ASSIGN_OR_RETURN_IMPL_(RTFT_STATUS_CONCAT_(rtft_statusor_, __LINE__), lhs, expr)
#define RTFT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
