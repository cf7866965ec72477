// The health check (docs/launcher.md, "Health check"): the agent runs RTFT_HEALTH_CHECK
// (rtft-health beside dp-launch by default) for the slot's GPU every --health-period-s, in a
// short-lived process of its own (dp-launch never touches CUDA or NVML), bounded by
// --health-timeout-s. A spare is checked when it starts and then every period, in full; a check
// that fails or overruns retires the spare with its reason (a failure of kind "health check" with
// no rank); activation never waits for a check: it takes the spare as its last verdict left it,
// and a check still running is ended (the rank needs the GPU now). A slot that holds a rank is
// checked passively (`--passive`: NVML's view and the host, no CUDA context beside the rank's),
// first one period after it took the rank; a failed check sends its rank to a spare as a device
// error would (the slot is retired, its application with it).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "launcher/agent.h"
#include "launcher/executable.h"

extern char** environ;

namespace rtft::launch {
namespace {

// The checker's output kept for the log: its verdict is one line.
constexpr size_t kMaxOutput = 4096;

// The checker's path: the option's, else rtft-health in dp-launch's own folder.
std::string Checker(const std::string& option) {
  if (!option.empty()) return option;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "rtft-health";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "rtft-health";
}

// The last non-empty line of `text`.
std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

}  // namespace

void Agent::CheckHealth() {
  const auto period = config_.options.health_period;
  if (period.count() <= 0) return;
  const auto now = Clock::now();
  const bool active = !is_spare();
  if (health_.pid > 0) {
    if (done_ || shutting_down_) return EndHealthCheck("the job is ending");
    if (active && !health_.passive) return EndHealthCheck("the slot is no spare now");
    return PollHealthCheck(now);
  }
  if (done_ || shutting_down_ || health_.disabled) return;
  if (active != health_.active) {  // the slot took a rank, or gave it back
    health_.active = active;
    health_.next = active ? now + period : now;
  }
  if (now < health_.next || (active && state_ != AppState::kRunning)) return;
  StartHealthCheck(now, active);
}

void Agent::StartHealthCheck(Clock::time_point now, bool passive) {
  const std::string checker = Checker(config_.options.health_check);
  auto path = ResolveExecutable(checker);
  if (!path.ok()) {
    RTFT_LOG(kWarn, kLogLaunch) << "slot " << config_.slot
                                << ": no health check: " << path.status().message()
                                << " (build rtft-health, or set --health-check)";
    health_.disabled = true;
    return;
  }
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    RTFT_LOG(kWarn, kLogLaunch) << "health check: pipe: " << std::strerror(errno);
    health_.next = now + config_.options.health_period;
    return;
  }
  // Its environment is dp-launch's, plus the slot (so that a test's "S/health.check" fault can
  // aim at one spare; RTFT_RESTART_COUNT 0: every check is a first process).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "RTFT_SLOT=", 10) != 0 && std::strncmp(*e, "RTFT_RESTART_COUNT=", 19) != 0)
      env.emplace_back(*e);
  }
  env.push_back("RTFT_SLOT=" + std::to_string(config_.slot));
  env.push_back("RTFT_RESTART_COUNT=0");
  // A slot that holds a rank checks the rank's device (an activated spare may hold the lost
  // slot's GPU, not its own); a spare, its own.
  health_.device = passive && assignment_.device >= 0 ? assignment_.device : config_.device;
  std::vector<std::string> args = {*path, "--device", std::to_string(health_.device)};
  if (passive) args.push_back("--passive");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, path->c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    RTFT_LOG(kWarn, kLogLaunch) << "health check: cannot start " << *path << ": "
                                << std::strerror(rc);
    health_.next = now + config_.options.health_period;
    return;
  }
  (void)fcntl(out[0], F_SETFL, O_NONBLOCK);
  health_.pid = pid;
  health_.fd = out[0];
  health_.output.clear();
  health_.started = now;
  health_.passive = passive;
  RTFT_LOG(kDebug, kLogLaunch) << "slot " << config_.slot << ": health check started (pid " << pid
                               << ", device " << health_.device << (passive ? ", passive" : "")
                               << ")";
}

void Agent::PollHealthCheck(Clock::time_point now) {
  char buf[1024];
  while (true) {
    const ssize_t n = read(health_.fd, buf, sizeof(buf));
    if (n <= 0) break;
    if (health_.output.size() < kMaxOutput)
      health_.output.append(buf, std::min<size_t>(n, kMaxOutput - health_.output.size()));
  }
  int status = 0;
  const pid_t got = waitpid(health_.pid, &status, WNOHANG);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now - health_.started);
  if (got == 0) {
    if (now - health_.started <= config_.options.health_timeout) return;
    EndHealthCheck("");
    return HealthFailed("took longer than " +
                        std::to_string(config_.options.health_timeout.count()) + " s");
  }
  if (got < 0) {
    RTFT_LOG(kWarn, kLogLaunch) << "health check: waitpid: " << std::strerror(errno);
    return EndHealthCheck("");
  }
  close(health_.fd);
  health_.fd = -1;
  health_.pid = -1;
  health_.next = now + config_.options.health_period;
  const std::string verdict = LastLine(health_.output);
  {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": healthy (" << took.count()
                                  << " ms): " << verdict;
      return;
    }
    const std::string how = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                              : "signal " + std::to_string(WTERMSIG(status));
    return HealthFailed(how + (verdict.empty() ? "" : ": " + verdict));
  }
}

void Agent::EndHealthCheck(const std::string& why) {
  if (health_.pid <= 0) return;
  kill(health_.pid, SIGKILL);
  int status = 0;
  (void)waitpid(health_.pid, &status, 0);
  close(health_.fd);
  health_.fd = -1;
  health_.pid = -1;
  health_.next = Clock::now() + config_.options.health_period;
  if (!why.empty())
    RTFT_LOG(kInfo, kLogLaunch) << "slot " << config_.slot << ": health check ended: " << why;
}

void Agent::HealthFailed(const std::string& why) {
  health_.disabled = true;  // the slot is retired: nothing more to check
  if (health_.passive && !is_spare()) {
    RTFT_LOG(kError, kLogLaunch) << "slot " << config_.slot << " (device " << health_.device
                                 << ", rank " << assignment_.rank
                                 << "): health check failed: " << why
                                 << "; its rank goes to a spare (a device error)";
    Status s = client_->ReportFailure(control::FailureKind::kDeviceError, assignment_.rank, 0);
    if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting the failed health check: " << s;
    return;
  }
  RTFT_LOG(kError, kLogLaunch) << "slot " << config_.slot << " (device " << config_.device
                               << "): health check failed: " << why
                               << "; the spare leaves the pool";
  Status s = client_->ReportFailure(control::FailureKind::kUnhealthy, control::kNoRank, 0);
  if (!s.ok()) RTFT_LOG(kWarn, kLogLaunch) << "reporting the failed health check: " << s;
}

}  // namespace rtft::launch
