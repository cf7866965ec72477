#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/check.h"
#include "core/params.h"

namespace rtft {
namespace {

struct LogConfig {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<uint32_t> mask{~0u};
  std::atomic<int> rank{-1};
  char host[64] = "?";
};

uint32_t ParseMask(const std::string& text) {
  static const struct {
    const char* name;
    uint32_t bit;
  } kNames[] = {{"core", kLogCore},       {"ckpt", kLogCkpt},       {"io", kLogIo},
                {"comm", kLogComm},       {"offload", kLogOffload}, {"ctrl", kLogCtrl},
                {"runtime", kLogRuntime}, {"launch", kLogLaunch},   {"tool", kLogTool}};
  if (text.empty() || text == "all") return ~0u;
  uint32_t mask = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    for (char& c : item) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const auto& n : kNames)
      if (item == n.name) mask |= n.bit;
    start = end + 1;
  }
  return mask;
}

LogConfig& Config() {
  static LogConfig* config = [] {
    auto* c = new LogConfig();
    LogLevel level;
    if (ParseLogLevel(ParamString(Param::kLogLevel), &level)) c->level = static_cast<int>(level);
    c->mask = ParseMask(ParamString(Param::kLogSubsys));
    gethostname(c->host, sizeof(c->host) - 1);
    if (auto rank = ParamInt(Param::kRank); rank.ok() && ParamIsSet(Param::kRank))
      c->rank = static_cast<int>(*rank);
    return c;
  }();
  return *config;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kTrace:
      return "TRACE";
  }
  return "?";
}

const char* SubsysName(LogSubsystem s) {
  switch (s) {
    case kLogCore:
      return "CORE";
    case kLogCkpt:
      return "CKPT";
    case kLogIo:
      return "IO";
    case kLogComm:
      return "COMM";
    case kLogOffload:
      return "OFFLOAD";
    case kLogCtrl:
      return "CTRL";
    case kLogRuntime:
      return "RUNTIME";
    case kLogLaunch:
      return "LAUNCH";
    case kLogTool:
      return "TOOL";
  }
  return "?";
}

}  // namespace

bool LogEnabled(LogLevel level, LogSubsystem subsys) {
  LogConfig& c = Config();
  return static_cast<int>(level) <= c.level.load(std::memory_order_relaxed) &&
         (c.mask.load(std::memory_order_relaxed) & subsys) != 0;
}

void SetLogLevel(LogLevel level) { Config().level = static_cast<int>(level); }
void SetLogRank(int rank) { Config().rank = rank; }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  static const struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"error", LogLevel::kError},
                 {"warn", LogLevel::kWarn},
                 {"info", LogLevel::kInfo},
                 {"debug", LogLevel::kDebug},
                 {"trace", LogLevel::kTrace}};
  for (const auto& l : kLevels) {
    if (text == l.name) {
      *level = l.level;
      return true;
    }
  }
  return false;
}

namespace internal {

LogMessage::LogMessage(LogLevel level, LogSubsystem subsys, const char* file, int line) {
  LogConfig& c = Config();
  const char* base = std::strrchr(file, '/');
  int rank = c.rank.load(std::memory_order_relaxed);
  stream_ << "[" << c.host << ":" << getpid() << ":";
  if (rank >= 0) {
    stream_ << rank;
  } else {
    stream_ << "-";
  }
  stream_ << "] " << LevelName(level) << " " << SubsysName(subsys) << " "
          << (base ? base + 1 : file) << ":" << line << " ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write per line so that lines from threads and ranks do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

void CheckFailed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "rt-ft: check failed at %s:%d: %s%s%s\n", file, line, expr, msg ? ": " : "",
               msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal
}  // namespace rtft
