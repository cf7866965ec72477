// A small application for the launcher tests and `rtft-bench detect`: it runs under dp-launch
// with rtft::Runtime and writes what it sees as `key=value` lines to <RTFT_TEST_DIR>/slot-<S>.log
// (one file per slot, appended by every process started on it), so a test can assert roles,
// ranks, epochs and events. Settings (environment):
//   RTFT_TEST_DIR       log and command directory (required)
//   RTFT_TEST_STEPS     steps to run (default 20); RTFT_TEST_STEP_MS: sleep per step (100)
//   RTFT_TEST_EXIT_CODE exit code after the last step (0)
//   RTFT_TEST_TERM_MS   how long it takes to exit after SIGTERM (0), logging `sigterm` first
//   RTFT_TEST_THROWING_LISTENER=1: a failure listener that throws, subscribed before the one that
//                       logs events
//   RTFT_TEST_WAIT_EPOCH do not finish the last step before an epoch this high was seen (its own
//                       start epoch or an event; 60 s at most): a test's failure must happen
//                       before the job can end, however fast the machine
// Commands: a file <dir>/cmd-rank<R> holding `crash`, `hang`, `exit N`, `device-error` or
// `daemonize` (a grandchild that calls setsid() and outlives its parent, logging `daemon`) is
// consumed at the next step by the process holding logical rank R. SIGUSR1 is logged
// (`signal usr1`) at the next step.
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "rtft/runtime.h"

namespace {

std::mutex g_log_mu;
FILE* g_log = stdout;
std::atomic<bool> g_term{false};
std::atomic<bool> g_usr1{false};
// The listener logged the shutdown event: the main loop, which may poll the same event first,
// waits for that before it exits, so the log always has the event line (tests read it).
std::atomic<bool> g_shutdown_logged{false};

void WaitForShutdownLine() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!g_shutdown_logged && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

// Tells this process's lines from those of others on the slot: pids repeat across the PID
// namespaces a slot's applications run in.
long long g_id = NowUs();

void Log(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(g_log, "%s id=%lld t=%lld\n", line.c_str(), g_id, NowUs());
  std::fflush(g_log);
}

long EnvLong(const char* name, long def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : def;
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "-" : s;
}

std::string EventLine(const rtft::FailureEvent& e) {
  std::ostringstream o;
  o << "event epoch=" << e.epoch << " rank=" << e.rank << " world=" << e.world_size
    << " failed=" << Join(e.failed_ranks) << " shutdown=" << e.shutdown
    << " checkpoint=" << e.checkpoint_first << " pid=" << getpid();
  return o.str();
}

// The command for `rank`, consumed; empty when there is none.
std::string TakeCommand(const std::string& dir, int rank) {
  const std::string path = dir + "/cmd-rank" + std::to_string(rank);
  const std::string taken = path + ".taken." + std::to_string(getpid());
  if (std::rename(path.c_str(), taken.c_str()) != 0) return "";
  std::ifstream in(taken);
  std::string cmd;
  std::getline(in, cmd);
  return cmd;
}

// A process that leaves the application's group and session and is no child of it: setsid() in a
// child, then a grandchild that the child leaves behind. It logs and waits to be killed.
void Daemonize(int rank) {
  const pid_t child = fork();
  if (child < 0) return;
  if (child == 0) {
    setsid();
    if (fork() == 0) {
      g_id = NowUs();
      Log("daemon rank=" + std::to_string(rank) + " pid=" + std::to_string(getpid()));
      while (true) pause();
    }
    _exit(0);
  }
  while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

int main() {
  const char* dir_env = std::getenv("RTFT_TEST_DIR");
  if (!dir_env) {
    std::fprintf(stderr, "rtft_test_app: set RTFT_TEST_DIR\n");
    return 2;
  }
  const std::string dir = dir_env;
  const char* slot_env = std::getenv("RTFT_SLOT");
  const std::string log_path = dir + "/slot-" + (slot_env ? slot_env : "0") + ".log";
  g_log = std::fopen(log_path.c_str(), "a");
  if (!g_log) return 2;
  signal(SIGTERM, [](int) { g_term = true; });
  signal(SIGUSR1, [](int) { g_usr1 = true; });
  const char* role_env = std::getenv("RTFT_ROLE");
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  auto env_or_dash = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v && *v ? v : "-");
  };
  Log("launched pid=" + std::to_string(getpid()) + " ppid=" + std::to_string(getppid()) +
      " env_role=" + (role_env ? role_env : "-") +
      " env_rank=" + std::to_string(EnvLong("RTFT_RANK", -1)) + " uid=" + std::to_string(getuid()) +
      " nofile=" + std::to_string(nofile.rlim_cur) + " nccl_algo=" + env_or_dash("NCCL_ALGO") +
      " nccl_proto=" + env_or_dash("NCCL_PROTO") + " env_device=" + env_or_dash("RTFT_DEVICE"));

  auto rt = rtft::Runtime::Create();
  if (!rt.ok()) {
    Log("error create " + rt.status().ToString());
    return 3;
  }
  const rtft::RuntimeInfo info = (*rt)->info();
  int rank = info.rank;
  std::ostringstream start;
  start << "start pid=" << getpid() << " ppid=" << getppid() << " slot=" << info.slot
        << " role=" << rtft::RuntimeRoleName(info.role) << " rank=" << info.rank
        << " world=" << info.world_size << " epoch=" << info.epoch << " device=" << info.device;
  Log(start.str());
  // An application's bug in a listener must not end the rank: the next listener still runs.
  if (EnvLong("RTFT_TEST_THROWING_LISTENER", 0))
    (void)(*rt)->Subscribe(
        [](const rtft::FailureEvent&) { throw std::runtime_error("a listener's bug"); });
  (*rt)->OnFailure([](const rtft::FailureEvent& e) {
    Log(EventLine(e));
    if (e.shutdown) g_shutdown_logged = true;
  });

  // A restarted or activated rank resumes from the step its predecessor last published.
  long step = 0;
  if (info.role != rtft::RuntimeRole::kInitial && info.role != rtft::RuntimeRole::kStandalone) {
    auto v = (*rt)->KvGet("step/" + std::to_string(rank), std::chrono::milliseconds(2000));
    if (v.ok()) step = std::atol(v->c_str());
    Log("resume rank=" + std::to_string(rank) + " step=" + std::to_string(step) +
        " kv=" + (v.ok() ? "ok" : v.status().ToString()));
  }
  const long steps = EnvLong("RTFT_TEST_STEPS", 20);
  const long step_ms = EnvLong("RTFT_TEST_STEP_MS", 100);
  int code = static_cast<int>(EnvLong("RTFT_TEST_EXIT_CODE", 0));
  uint64_t seen_epoch = info.epoch;
  for (; step < steps; ++step) {
    while (auto e = (*rt)->PollEvent()) {
      seen_epoch = std::max<uint64_t>(seen_epoch, e->epoch);
      if (e->rank >= 0) rank = e->rank;  // a shrink renumbers the ranks
      if (!e->shutdown) continue;
      if (e->checkpoint_first)
        Log("checkpoint rank=" + std::to_string(rank) + " step=" + std::to_string(step));
      WaitForShutdownLine();
      Log("exit rank=" + std::to_string(rank) + " code=0 why=shutdown");
      return 0;
    }
    if (g_term) {
      // Like an application that writes a checkpoint before it exits.
      Log("sigterm rank=" + std::to_string(rank));
      std::this_thread::sleep_for(std::chrono::milliseconds(EnvLong("RTFT_TEST_TERM_MS", 0)));
      Log("exit rank=" + std::to_string(rank) + " code=143 why=sigterm");
      return 143;
    }
    if (g_usr1.exchange(false)) Log("signal usr1 rank=" + std::to_string(rank));
    const std::string cmd = TakeCommand(dir, rank);
    if (cmd == "daemonize") {
      Daemonize(rank);
    } else if (cmd == "crash") {
      Log("crash rank=" + std::to_string(rank));
      kill(getpid(), SIGKILL);
    } else if (cmd == "hang") {
      Log("hang rank=" + std::to_string(rank));
      while (true) pause();
    } else if (cmd == "device-error") {
      (void)(*rt)->ReportDeviceError("test: device lost");
    } else if (cmd.rfind("exit ", 0) == 0) {
      code = std::atoi(cmd.c_str() + 5);
      Log("exit rank=" + std::to_string(rank) + " code=" + std::to_string(code) + " why=command");
      return code;
    }
    (void)(*rt)->KvPut("step/" + std::to_string(rank), std::to_string(step));
    (void)(*rt)->ReportStep(static_cast<uint64_t>(step));
    Log("step rank=" + std::to_string(rank) + " step=" + std::to_string(step));
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  const long wait_epoch = EnvLong("RTFT_TEST_WAIT_EPOCH", 0);
  const auto wait_end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen_epoch < static_cast<uint64_t>(wait_epoch) &&
         std::chrono::steady_clock::now() < wait_end) {
    while (auto e = (*rt)->PollEvent()) {
      seen_epoch = std::max<uint64_t>(seen_epoch, e->epoch);
      if (e->rank >= 0) rank = e->rank;
      if (e->shutdown) {
        WaitForShutdownLine();
        Log("exit rank=" + std::to_string(rank) + " code=0 why=shutdown");
        return 0;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Log("exit rank=" + std::to_string(rank) + " code=" + std::to_string(code) + " why=done");
  return code;
}
