#include "bench/common/bench_job.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "bench/common/bench_util.h"

namespace rtft::bench {

using std::chrono::milliseconds;

long long NowUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

std::string SelfPath() {
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return std::string(buf, n > 0 ? n : 0);
}

std::string NextToSelf(const std::string& name) {
  const std::string self = SelfPath();
  return self.substr(0, self.rfind('/')) + "/" + name;
}

std::string MissingTool(const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (access(NextToSelf(name).c_str(), X_OK) != 0) return NextToSelf(name);
  return "";
}

std::vector<Fields> Lines(const std::string& dir, int slot, const std::string& kind) {
  std::vector<Fields> out;
  std::ifstream in(dir + "/slot-" + std::to_string(slot) + ".log");
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream words(text);
    std::string first, word;
    words >> first;
    if (first != kind) continue;
    Fields kv;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) kv[word.substr(0, eq)] = word.substr(eq + 1);
    }
    out.push_back(std::move(kv));
  }
  return out;
}

long long Num(const Fields& kv, const char* key) {
  auto it = kv.find(key);
  return it == kv.end() ? -1 : std::atoll(it->second.c_str());
}
double Real(const Fields& kv, const char* key) {
  auto it = kv.find(key);
  return it == kv.end() ? -1 : std::atof(it->second.c_str());
}

bool WaitUntil(const std::function<bool()>& pred, milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pid, as this process sees it, of the job's process named `comm` (the first 15 characters)
// on `slot`: its environment holds `marker` and RTFT_SLOT=<slot>.
pid_t SlotProcess(const std::string& marker, int slot, const std::string& comm) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string dir = "/proc/" + std::string(e->d_name);
    std::string name = ReadFile(dir + "/comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (name != comm.substr(0, 15)) continue;
    const std::string env = ReadFile(dir + "/environ");
    const std::string want = std::string("RTFT_SLOT=") + std::to_string(slot) + '\0';
    if (env.find(marker) != std::string::npos && env.find(want) != std::string::npos)
      found = static_cast<pid_t>(pid);
  }
  closedir(d);
  return found;
}

// Every process of a job (its environment holds `marker`) still alive.
void KillMarked(const std::string& marker) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    if (ReadFile("/proc/" + std::string(e->d_name) + "/environ").find(marker) != std::string::npos)
      kill(static_cast<pid_t>(pid), SIGKILL);
  }
  closedir(d);
}

// The dp-launch running `pid` (its parent, or further up: a keeper may stand between).
pid_t AgentOf(pid_t pid) {
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string skip;
    pid_t ppid = 0;
    stat >> skip >> skip >> skip >> ppid;
    std::ifstream comm("/proc/" + std::to_string(ppid) + "/comm");
    std::string name;
    if ((comm >> name) && name == "dp-launch") return ppid;
    pid = ppid;
  }
  return 0;
}

pid_t SlotAgent(const std::string& marker, int slot) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return 0;
  pid_t found = 0;
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(slot) + '\0';
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string dir = "/proc/" + std::string(e->d_name);
    std::string name = ReadFile(dir + "/comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (name != "dp-launch") continue;
    const std::string env = ReadFile(dir + "/environ");
    if (env.find(marker) != std::string::npos && env.find(want) != std::string::npos)
      found = static_cast<pid_t>(pid);
  }
  closedir(d);
  return found;
}

BenchJob::~BenchJob() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Processes Open MPI put in groups of their own.
  KillMarked(Marker());
}

Status BenchJob::Start(const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) return Status::FromErrno(errno, "fork");
  if (pid_ == 0) {
    setpgid(0, 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("RTFT_FAULT_LOG", (dir_ + "/faults.log").c_str(), 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    FILE* f = std::fopen((dir_ + "/mpirun.out").c_str(), "w");
    if (f) dup2(fileno(f), 1), dup2(fileno(f), 2);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid_, pid_);
  return Status::Ok();
}

Status BenchJob::Wait(milliseconds timeout) {
  int status = 0;
  const bool done = WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
  if (!done) return Status::DeadlineExceeded("the job did not end (see " + dir_ + ")");
  pid_ = -1;
  return Status::Ok();
}

int BenchJob::FaultSlot() const {
  std::istringstream in(ReadFile(dir_ + "/faults.log"));
  std::string w;
  while (in >> w)
    if (w.rfind("slot=", 0) == 0) return std::atoi(w.c_str() + 5);
  return -1;
}

std::vector<std::string> DpLaunchArgs(int slots, const std::string& dp_launch,
                                      const std::vector<std::string>& dp_args) {
  std::vector<std::string> a = {
      "mpirun", "--bind-to",           "none",   "--oversubscribe", "--enable-recovery",
      "-np",    std::to_string(slots), dp_launch};
  a.insert(a.end(), dp_args.begin(), dp_args.end());
  a.push_back("--");
  return a;
}

std::vector<std::string> TrainJobArgs(int ranks, int hidden, int batch,
                                      const std::vector<std::string>& dp_extra,
                                      const std::vector<std::string>& train_extra) {
  std::vector<std::string> dp = {"--spares", "1"};
  // The straggler detector swaps a rank the scheduler leaves behind on a loaded machine, which
  // would use up the spare a benchmark's failure counts on: off unless the benchmark sets it
  // (rtft-bench straggler does).
  if (std::find(dp_extra.begin(), dp_extra.end(), "--straggler-pct") == dp_extra.end())
    dp.insert(dp.end(), {"--straggler-pct", "0"});
  dp.insert(dp.end(), dp_extra.begin(), dp_extra.end());
  std::vector<std::string> a = DpLaunchArgs(ranks + 1, NextToSelf("dp-launch"), dp);
  a.insert(a.end(), {NextToSelf("rtft-train"), "--hidden", std::to_string(hidden), "--batch",
                     std::to_string(batch)});
  a.insert(a.end(), train_extra.begin(), train_extra.end());
  return a;
}

void TrainDevice::AddFlags(CLI::App* cmd, bool with_offload) {
  cmd->add_option("--device", device, "where the trainer runs: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--comm", comm,
                  "--device cuda: nccl, or gloo (ranks sharing one GPU, staged through the host)")
      ->check(CLI::IsMember({"nccl", "gloo"}))
      ->capture_default_str();
  if (with_offload)
    cmd->add_flag("--offload", offload,
                  "--device cuda: the optimizer's state in pinned host memory (interleaved)");
}

std::vector<std::string> TrainDevice::Args() const {
  if (!cuda()) return {};
  std::vector<std::string> a = {"--device", "cuda", "--comm", comm};
  if (offload) a.push_back("--offload");
  return a;
}

std::string TrainDevice::Name() const {
  if (!cuda()) return device;
  return device + "/" + comm + (offload ? "/offload" : "");
}

StatusOr<TrainTimes> RunTrainTimed(const std::string& dir, int ranks, int hidden, int batch,
                                   const std::vector<std::string>& train_extra,
                                   milliseconds timeout) {
  BenchJob job(dir, ranks + 1);
  RTFT_RETURN_IF_ERROR(job.Start(TrainJobArgs(ranks, hidden, batch, {}, train_extra)));
  RTFT_RETURN_IF_ERROR(job.Wait(timeout));
  const std::string out = job.Output();
  // Bounded digits: std::stod and std::stoull never see a number out of their range.
  static const std::regex done(
      R"(\[train 0\] done .* step_s=([0-9]{1,9}(?:\.[0-9]{1,12})?) .*state_bytes=(\d{1,19}))");
  std::smatch m;
  if (!std::regex_search(out, m, done))
    return Status::Internal("the job did not finish (see " + dir + "/mpirun.out)");
  TrainTimes t;
  t.step_s = std::stod(m[1]);
  t.state_bytes = std::stoull(m[2]);
  if (!(t.step_s > 0))
    return Status::Internal("the job timed no step (see " + dir + "/mpirun.out)");
  return t;
}

StatusOr<int> CalibrateBatch(int ranks, int hidden, double step_s,
                             const std::vector<std::string>& train_extra) {
  // A step has a share that does not grow with the batch (collectives, a GPU's launches, the
  // gradients staged through the host for Gloo), so a probe scaled in proportion falls short,
  // by far on a GPU: after the first probe the next batch comes from the line through the last
  // two. What is returned was probed: the first batch within 15 % of `step_s`, else the closest
  // of six.
  constexpr int kProbes = 6;
  constexpr double kClose = 0.15;
  int batch = 32, best = batch, last_batch = 0;
  double best_error = -1, last_s = 0;
  for (int probe = 0; probe < kProbes; ++probe) {
    RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
    std::vector<std::string> extra = {"--steps", "10", "--log-every", "1000000", "--no-protect"};
    extra.insert(extra.end(), train_extra.begin(), train_extra.end());
    auto times = RunTrainTimed(dir, ranks, hidden, batch, extra, milliseconds(600000));
    if (!times.ok()) return times.status().Annotate("calibrating the batch");
    const double probe_s = times->step_s;
    (void)RemoveTree(dir);
    const double error = std::abs(probe_s - step_s) / step_s;
    if (best_error < 0 || error < best_error) {
      best = batch;
      best_error = error;
    }
    Progress("calibrating the batch: " + std::to_string(batch) + " samples, " +
             std::to_string(probe_s) + " s per step (the target " + std::to_string(step_s) + " s)");
    if (error <= kClose) return batch;
    const double slope =
        last_batch > 0 && batch != last_batch ? (probe_s - last_s) / (batch - last_batch) : 0;
    double next = slope > 0 ? batch + (step_s - probe_s) / slope : batch * step_s / probe_s;
    // A noisy pair of probes can give any slope: at most 64 times larger, 16 times smaller.
    next = std::clamp(next, batch / 16.0, batch * 64.0);
    const int n = static_cast<int>(std::clamp(std::lround(next), 1L, 65536L));
    if (n == batch) break;  // at a limit
    last_batch = batch;
    last_s = probe_s;
    batch = n;
  }
  return best;
}

}  // namespace rtft::bench
