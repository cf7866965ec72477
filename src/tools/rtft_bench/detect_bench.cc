#include "tools/rtft_bench/detect_bench.h"

#include "tools/rtft_bench/bench_job.h"

#include <dirent.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

std::string SelfDir() {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path(buf, n > 0 ? n : 0);
  return path.substr(0, path.rfind('/'));
}

// `key=value` of the lines of one slot's test-application log that start with `kind`.
std::vector<std::map<std::string, std::string>> Lines(const std::string& dir, int slot,
                                                      const std::string& kind) {
  std::vector<std::map<std::string, std::string>> out;
  std::ifstream in(dir + "/slot-" + std::to_string(slot) + ".log");
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream words(text);
    std::string first, word;
    words >> first;
    if (first != kind) continue;
    std::map<std::string, std::string> kv;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) kv[word.substr(0, eq)] = word.substr(eq + 1);
    }
    out.push_back(std::move(kv));
  }
  return out;
}

long Num(const std::map<std::string, std::string>& kv, const char* key) {
  auto it = kv.find(key);
  return it == kv.end() ? -1 : std::atol(it->second.c_str());
}

std::string ReadProcFile(long pid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A live process of the job: its pid as this process sees it, comm, environment, and its pid in
// its own PID namespace (dp-launch runs each application in one: the logs carry that pid).
struct JobProcess {
  long pid = 0;
  std::string comm;
  std::string env;  // NUL-separated, with a NUL in front
  long inner = 0;
  bool Has(const std::string& var) const {
    return env.find('\0' + var + '\0') != std::string::npos;
  }
};

std::vector<JobProcess> JobProcesses(const std::string& dir) {
  std::vector<JobProcess> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    JobProcess p;
    char* end = nullptr;
    p.pid = std::strtol(e->d_name, &end, 10);
    if (p.pid <= 0 || *end != '\0') continue;
    p.env = '\0' + ReadProcFile(p.pid, "environ");
    if (!p.Has("RTFT_TEST_DIR=" + dir)) continue;
    const std::string stat = ReadProcFile(p.pid, "stat");
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size() ||
        stat[close + 2] == 'Z')
      continue;
    p.comm = stat.substr(open + 1, close - open - 1);
    std::istringstream status(ReadProcFile(p.pid, "status"));
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("NSpid:", 0) == 0) {
        std::istringstream ids(line.substr(6));
        while (ids >> p.inner) {
        }
      }
    out.push_back(std::move(p));
  }
  closedir(d);
  return out;
}

bool WaitUntil(const std::function<bool()>& pred, milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

class BenchJob {
 public:
  BenchJob(const DetectRealOptions& o, int slots, std::string dir)
      : o_(o), slots_(slots), dir_(std::move(dir)) {}
  ~BenchJob() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    // Processes Open MPI put in groups of their own.
    for (const JobProcess& p : JobProcesses(dir_)) kill(static_cast<pid_t>(p.pid), SIGKILL);
  }

  Status Start() {
    std::vector<std::string> args =
        DpLaunchArgs(slots_, o_.dp_launch,
                     {"--spares", "1", "--heartbeat-ms", std::to_string(o_.heartbeat_ms),
                      "--heartbeat-timeout-ms", std::to_string(o_.heartbeat_timeout_ms)});
    args.push_back(o_.app);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) return Status::FromErrno(errno, "fork");
    if (pid_ == 0) {
      setpgid(0, 0);
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      setenv("RTFT_TEST_DIR", dir_.c_str(), 1);
      setenv("RTFT_TEST_STEPS", "100000", 1);
      setenv("RTFT_TEST_STEP_MS", "50", 1);
      FILE* f = std::fopen((dir_ + "/mpirun.out").c_str(), "w");
      if (f) dup2(fileno(f), 1), dup2(fileno(f), 2);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    setpgid(pid_, pid_);
    return Status::Ok();
  }

  // The latest process holding `rank`: its pid and its slot's dp-launch.
  bool Find(int rank, pid_t* app, pid_t* agent) const {
    long slot = -1, inner = -1;
    for (int s = 0; s < slots_; ++s)
      for (const auto& l : Lines(dir_, s, "start"))
        if (Num(l, "rank") == rank) {
          slot = s;
          inner = Num(l, "pid");
        }
    *app = *agent = 0;
    for (const JobProcess& p : JobProcesses(dir_)) {
      if (p.comm == "launcher-test-a" && p.inner == inner &&
          p.Has("RTFT_SLOT=" + std::to_string(slot)))
        *app = static_cast<pid_t>(p.pid);
      if (p.comm == "dp-launch" && p.Has("OMPI_COMM_WORLD_RANK=" + std::to_string(slot)))
        *agent = static_cast<pid_t>(p.pid);
    }
    return *app > 0 && *agent > 0;
  }
  long LastStep(int rank) const {
    long last = -1;
    for (int s = 0; s < slots_; ++s)
      for (const auto& l : Lines(dir_, s, "step"))
        if (Num(l, "rank") == rank) last = std::max(last, Num(l, "step"));
    return last;
  }
  // When slot 0's application received the event of `epoch` (realtime us), or -1.
  long long EventAt(long epoch) const {
    for (const auto& l : Lines(dir_, 0, "event"))
      if (Num(l, "epoch") == epoch) return std::atoll(l.at("t").c_str());
    return -1;
  }

 private:
  const DetectRealOptions& o_;
  const int slots_;
  const std::string dir_;
  pid_t pid_ = -1;
};

// Kills `victims` and returns the milliseconds until rank 0 hears of `epoch`.
StatusOr<double> Measure(const BenchJob& job, const std::vector<pid_t>& victims, long epoch,
                         milliseconds timeout) {
  const long long t0 = NowUs();
  for (pid_t p : victims) kill(p, SIGKILL);
  long long at = -1;
  if (!WaitUntil([&] { return (at = job.EventAt(epoch)) > 0; }, timeout))
    return Status::DeadlineExceeded("rank 0 saw no epoch " + std::to_string(epoch));
  return (at - t0) / 1000.0;
}

Status RunOne(const DetectRealOptions& o, int slots, JsonLines* out) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  Status s = [&]() -> Status {
    BenchJob job(o, slots, dir);
    RTFT_RETURN_IF_ERROR(job.Start());
    const int actives = slots - 1;
    if (!WaitUntil(
            [&] {
              for (int r = 0; r < actives; ++r)
                if (job.LastStep(r) < 2) return false;
              return true;
            },
            milliseconds(60000)))
      return Status::DeadlineExceeded("the job's ranks did not start (see " + dir + ")");
    pid_t app, agent;
    if (!job.Find(1, &app, &agent)) return Status::Internal("rank 1 not found");
    auto crash = Measure(job, {app}, 2, milliseconds(10000));
    RTFT_RETURN_IF_ERROR(crash.status());
    nlohmann::json line = {{"bench", "detect"},       {"mode", "processes"},  {"slots", slots},
                           {"kind", "process_crash"}, {"latency_ms", *crash}, {"target_ms", 50},
                           {"met", *crash <= 50}};
    out->Emit(line);
    // Slot loss: the agent and the application of rank 2 (or 0's neighbour in a 2-rank job).
    const int victim = actives > 2 ? 2 : 1;
    if (!WaitUntil([&] { return job.LastStep(1) >= job.LastStep(0) - 1; }, milliseconds(20000)))
      return Status::DeadlineExceeded("rank 1 did not resume after its restart");
    if (!job.Find(victim, &app, &agent)) return Status::Internal("victim rank not found");
    auto lost = Measure(job, {agent, app}, 3, milliseconds(10 * o.heartbeat_timeout_ms + 10000));
    RTFT_RETURN_IF_ERROR(lost.status());
    const double target = 1.5 * static_cast<double>(o.heartbeat_timeout_ms);
    line = {{"bench", "detect"},
            {"mode", "processes"},
            {"slots", slots},
            {"kind", "slot_loss"},
            {"latency_ms", *lost},
            {"heartbeat_ms", o.heartbeat_ms},
            {"heartbeat_timeout_ms", o.heartbeat_timeout_ms},
            {"target_ms", target},
            {"met", *lost <= target}};
    out->Emit(line);
    return Status::Ok();
  }();
  if (s.ok()) (void)RemoveTree(dir);
  return s;
}

}  // namespace

void AddDetectRealFlags(CLI::App* cmd, DetectRealOptions* o, std::string* slots_text) {
  cmd->add_option("--slots", *slots_text, "real processes: slot counts (mpirun -np), comma list")
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "real processes: jobs per slot count")
      ->capture_default_str();
  cmd->add_option("--dp-launch", o->dp_launch, "dp-launch binary (default: next to rtft-bench)");
  cmd->add_option("--app", o->app, "test application (default: <build>/tests/launcher-test-app)");
}

Status RunDetectReal(DetectRealOptions o, const std::string& slots_text, JsonLines* out) {
  if (!slots_text.empty()) {
    RTFT_ASSIGN_OR_RETURN(o.slots, ParseCountList(slots_text));
  }
  const std::string bin = SelfDir();
  if (o.dp_launch.empty()) o.dp_launch = bin + "/dp-launch";
  if (o.app.empty()) o.app = bin + "/../tests/launcher-test-app";
  for (const auto& p : {o.dp_launch, o.app})
    if (access(p.c_str(), X_OK) != 0) return Status::NotFound(p + " is not built");
  for (uint64_t n : o.slots) {
    if (n < 3) return Status::InvalidArgument("--slots: at least 3 (2 ranks and a spare)");
    for (int r = 0; r < o.repeats; ++r) {
      Progress("detect: " + std::to_string(n) + " slots, run " + std::to_string(r + 1));
      RTFT_RETURN_IF_ERROR(RunOne(o, static_cast<int>(n), out));
    }
  }
  return Status::Ok();
}

}  // namespace rtft::bench
