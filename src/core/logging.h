// Leveled logging with a subsystem mask. Each line starts with host, pid and rank so that the
// merged output of many ranks can be read. An error is logged once, where it is detected.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace rtft {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Subsystems, selected with RTFT_LOG_SUBSYS (comma-separated names or "all").
enum LogSubsystem : uint32_t {
  kLogCore = 1u << 0,
  kLogCkpt = 1u << 1,
  kLogIo = 1u << 2,
  kLogComm = 1u << 3,
  kLogOffload = 1u << 4,
  kLogCtrl = 1u << 5,
  kLogRuntime = 1u << 6,
  kLogLaunch = 1u << 7,
  kLogTool = 1u << 8,
};

bool LogEnabled(LogLevel level, LogSubsystem subsys);
// Overrides RTFT_LOG_LEVEL; used by tools' --log-level flags.
void SetLogLevel(LogLevel level);
// Parses "error|warn|info|debug|trace".
bool ParseLogLevel(const std::string& text, LogLevel* level);
// The rank printed in each line; -1 (the default) prints "-".
void SetLogRank(int rank);

namespace internal {
struct LogVoidify {
  void operator&(std::ostream&) {}
};

class LogMessage {
 public:
  LogMessage(LogLevel level, LogSubsystem subsys, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace rtft

// An expression, not an if-statement, so it is safe inside an unbraced if/else. `&` binds more
// loosely than `<<`, so the whole stream expression is built before it is voided.
#define RTFT_LOG(level, subsys)                                                                 \
  !::rtft::LogEnabled(::rtft::LogLevel::level, ::rtft::subsys)                                  \
      ? (void)0                                                                                 \
      : ::rtft::internal::LogVoidify() & ::rtft::internal::LogMessage(::rtft::LogLevel::level,  \
                                                                      ::rtft::subsys, __FILE__, \
                                                                      __LINE__)                 \
                                             .stream()
