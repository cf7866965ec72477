// Invariant checks. A broken invariant is a bug in rt-ft: RTFT_CHECK logs file and line and
// aborts. Errors the caller can act on are returned as Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace rtft::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const char* msg);
}  // namespace rtft::internal

#define RTFT_CHECK(cond)                                                 \
  do {                                                                   \
    if (__builtin_expect(!(cond), 0))                                    \
      ::rtft::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)

#define RTFT_CHECK_MSG(cond, msg)                                      \
  do {                                                                 \
    if (__builtin_expect(!(cond), 0))                                  \
      ::rtft::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// Aborts when a Status that must not fail did.
#define RTFT_CHECK_OK(expr)                                                 \
  do {                                                                      \
    ::rtft::Status rtft_check_status_ = (expr);                             \
    if (!rtft_check_status_.ok())                                           \
      ::rtft::internal::CheckFailed(__FILE__, __LINE__, #expr,              \
                                    rtft_check_status_.ToString().c_str()); \
  } while (0)
