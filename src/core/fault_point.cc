#include "core/fault_point.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/params.h"

namespace rtft {
namespace {

struct Armed {
  long at = 1;         // fire on this hit
  std::string action;  // kill | stop | hang | exit=N | wait=PATH | repeat=F
};

constexpr const char* kRepeat = "repeat=";

// repeat=F's factor, checked: 1 (no repeat) for a malformed one.
double RepeatFactor(const std::string& action) {
  char* end = nullptr;
  const double f = std::strtod(action.c_str() + std::strlen(kRepeat), &end);
  if (end == nullptr || *end != '\0' || !(f >= 1.0 && f <= 1000.0)) return 1.0;
  return f;
}

std::mutex g_mu;
// Never destroyed: a thread of rt-ft may pass a fault point while the process exits.
std::map<std::string, Armed>& g_armed = *new std::map<std::string, Armed>;
std::map<std::string, long>& g_hits = *new std::map<std::string, long>;
// Whether any point is armed: an unarmed point costs one load of it.
std::atomic<bool> g_any{false};

// Whether a point qualified with slot `slot` ("2/point") is this process's: the first process
// started on that slot, so that the one restarted there after the fault does not fire it again.
bool OnThisSlot(const std::string& slot) {
  char* end = nullptr;
  const long want = std::strtol(slot.c_str(), &end, 10);
  if (slot.empty() || *end != '\0' || !ParamIsSet(Param::kSlot)) return false;
  auto mine = ParamInt(Param::kSlot);
  auto restarts = ParamInt(Param::kRestartCount);
  return mine.ok() && *mine == want && restarts.ok() && *restarts == 0;
}

void Parse(const std::string& spec) {
  g_armed.clear();
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    Armed a;
    a.action = "kill";
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      a.action = item.substr(colon + 1);
      item = item.substr(0, colon);
    }
    const size_t at = item.find('@');
    if (at != std::string::npos) {
      a.at = std::strtol(item.c_str() + at + 1, nullptr, 10);
      item = item.substr(0, at);
    }
    const size_t slash = item.find('/');
    if (slash != std::string::npos) {
      if (!OnThisSlot(item.substr(0, slash))) continue;
      item = item.substr(slash + 1);
    }
    if (a.at >= 1 && !item.empty()) g_armed[item] = a;
  }
}

void Note(const char* point, const std::string& action) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  // The slot (set by dp-launch) tells a test which process this is: inside dp-launch's PID
  // namespace every application is pid 2.
  const std::string slot = ParamIsSet(Param::kSlot) ? ParamString(Param::kSlot) : "-";
  char line[512];
  const int n = std::snprintf(line, sizeof(line), "fault %s %s pid=%d slot=%s t=%lld\n", point,
                              action.c_str(), static_cast<int>(getpid()), slot.c_str(),
                              static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec);
  const std::string log = ParamString(Param::kFaultLog);
  int fd = 2;
  if (!log.empty()) fd = open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0 && n > 0) (void)!write(fd, line, std::min<size_t>(n, sizeof(line) - 1));
  if (fd > 2) close(fd);
}

void Arm(const std::string& spec) {
  std::lock_guard<std::mutex> lock(g_mu);
  Parse(spec);
  g_hits.clear();
  g_any = !g_armed.empty();
}

// RTFT_FAULT arms the points at the first of FaultPoint() and ArmFaults(); an ArmFaults() call
// replaces it.
std::once_flag g_from_env;

}  // namespace

void ArmFaults(const char* spec) {
  std::call_once(g_from_env, [] {});
  Arm(spec ? spec : "");
}

void FaultPoint(const char* point) {
  std::call_once(g_from_env, [] { Arm(ParamString(Param::kFault)); });
  if (!g_any.load(std::memory_order_relaxed)) return;
  std::string action;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_armed.find(point);
    if (it == g_armed.end()) return;
    if (++g_hits[point] != it->second.at) return;
    action = it->second.action;
  }
  if (action.rfind(kRepeat, 0) == 0 || action == "flag" || action == "flags")
    return;  // FaultRepeats' and FaultFlag's to act on
  Note(point, action);
  if (action == "stop") {
    raise(SIGSTOP);
  } else if (action == "hang") {
    while (true) pause();
  } else if (action.rfind("exit=", 0) == 0) {
    _exit(std::atoi(action.c_str() + 5));
  } else if (action.rfind("touch=", 0) == 0) {
    // Creates the file and goes on: a wait=PATH elsewhere (a thread, a process) goes on then.
    const int fd = open(action.c_str() + 6, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
  } else if (action.rfind("wait=", 0) == 0) {
    // Holds this thread until a test creates the file: an order of events, not a delay.
    const std::string path = action.substr(5);
    while (access(path.c_str(), F_OK) != 0) usleep(1000);
  } else {
    raise(SIGKILL);
  }
}

bool FaultFlag(const char* point) {
  std::call_once(g_from_env, [] { Arm(ParamString(Param::kFault)); });
  if (!g_any.load(std::memory_order_relaxed)) return false;
  std::string action;
  long since = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_armed.find(point);
    if (it == g_armed.end() || (it->second.action != "flag" && it->second.action != "flags"))
      return false;
    since = ++g_hits[point] - it->second.at;
    action = it->second.action;
  }
  if (since < 0 || (since > 0 && action == "flag")) return false;
  if (since == 0) Note(point, action);
  return true;
}

int FaultRepeats(const char* point) {
  std::call_once(g_from_env, [] { Arm(ParamString(Param::kFault)); });
  if (!g_any.load(std::memory_order_relaxed)) return 1;
  std::string action;
  long since = 0;  // reaches since the n-th
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_armed.find(point);
    if (it == g_armed.end() || it->second.action.rfind(kRepeat, 0) != 0) return 1;
    since = ++g_hits[point] - it->second.at;
    if (since < 0) return 1;
    action = it->second.action;
  }
  if (since == 0) Note(point, action);
  // F on average and deterministic: the whole repeats owed after this reach, less those before.
  const double f = RepeatFactor(action);
  const auto owed = [f](long n) { return static_cast<long>(std::floor(n * f + 1e-9)); };
  return static_cast<int>(std::max(1L, owed(since + 1) - owed(since)));
}

}  // namespace rtft
