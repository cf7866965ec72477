#include "launcher/launch_job.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

namespace rtft::launch::test {

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ReadProc(pid_t pid, ProcInfo* info) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::string stat = ReadAll(dir + "/stat");
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size())
    return false;
  info->pid = pid;
  info->comm = stat.substr(open + 1, close - open - 1);
  info->state = stat[close + 2];
  info->ppid = static_cast<pid_t>(std::atol(stat.c_str() + close + 4));
  std::istringstream status(ReadAll(dir + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream words(line.substr(6));
    long v;
    while (words >> v) info->nspid.push_back(v);
  }
  const std::string environ = ReadAll(dir + "/environ");
  size_t begin = 0;
  while (begin < environ.size()) {
    size_t end = environ.find('\0', begin);
    if (end == std::string::npos) end = environ.size();
    const std::string entry = environ.substr(begin, end - begin);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) info->env[entry.substr(0, eq)] = entry.substr(eq + 1);
    begin = end + 1;
  }
  return true;
}

}  // namespace

std::vector<ProcInfo> JobProcesses(const std::string& dir) {
  std::vector<ProcInfo> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    ProcInfo info;
    if (!ReadProc(static_cast<pid_t>(pid), &info) || info.state == 'Z' || info.state == 'X')
      continue;
    if (info.Env("RTFT_TEST_DIR") == dir) out.push_back(std::move(info));
  }
  closedir(d);
  return out;
}

pid_t ParentOf(pid_t pid) {
  ProcInfo info;
  return ReadProc(pid, &info) ? info.ppid : 0;
}

bool Alive(pid_t pid) {
  ProcInfo info;
  return pid > 0 && ReadProc(pid, &info) && info.state != 'Z' && info.state != 'X';
}

std::string DpLaunchUnderTest() {
  const char* other = std::getenv("RTFT_TEST_DP_LAUNCH");
  return other && *other ? other : RTFT_DP_LAUNCH;
}

std::vector<std::string> BehindShell() {
  return {"/bin/bash", "-c", std::string(RTFT_TEST_APP) + "; exit $?"};
}

std::vector<LogLine> ReadSlotLog(const std::string& dir, int slot) {
  std::vector<LogLine> lines;
  std::ifstream in(dir + "/slot-" + std::to_string(slot) + ".log");
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream words(text);
    LogLine line;
    words >> line.kind;
    std::string word;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) line.kv[word.substr(0, eq)] = word.substr(eq + 1);
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<LogLine> LinesOf(const std::string& dir, int slot, const std::string& kind) {
  std::vector<LogLine> out;
  for (auto& l : ReadSlotLog(dir, slot))
    if (l.kind == kind) out.push_back(std::move(l));
  return out;
}

void ReadTrainOutput(const std::string& output, std::map<int, std::string>* digests,
                     int* recoveries) {
  static const std::regex done(R"(\[train (\d+)\] done [^\[]*? digest=([0-9a-f]+))");
  static const std::regex recovered(R"(\[train \d+\] recovered )");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), done);
       it != std::sregex_iterator(); ++it)
    (*digests)[std::stoi((*it)[1])] = (*it)[2];
  *recoveries = static_cast<int>(std::distance(
      std::sregex_iterator(output.begin(), output.end(), recovered), std::sregex_iterator()));
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

Job::~Job() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  KillLeftovers();
}

void Job::KillLeftovers() const {
  // Open MPI may put the processes it starts in groups of their own: kill every process of the
  // job, wherever it is.
  for (const ProcInfo& p : JobProcesses(dir_)) kill(p.pid, SIGKILL);
}

namespace {

std::vector<std::string> LauncherArgs(const JobSpec& spec) {
  const Launcher& l = spec.launcher;
  if (l.kind == Launcher::Kind::kHydra) {
    // Hydra neither binds nor limits the processes per host by default.
    if (spec.recovery) return {l.mpiexec, "-disable-auto-cleanup"};
    return {l.mpiexec};
  }
  std::vector<std::string> args = {l.mpiexec, "--bind-to", "none", "--oversubscribe"};
  if (spec.recovery) args.push_back("--enable-recovery");
  return args;
}

}  // namespace

void Job::Start(const JobSpec& spec) {
  slots_ = spec.slots;
  kind_ = spec.launcher.kind;
  std::vector<std::string> args = LauncherArgs(spec);
  args.insert(args.end(), spec.launcher_args.begin(), spec.launcher_args.end());
  auto app_context = [&](int np, const std::vector<std::string>& extra,
                         const std::vector<std::string>& app) {
    args.insert(args.end(), {"-np", std::to_string(np), spec.launcher.dp_launch});
    args.insert(args.end(), spec.dp_args.begin(), spec.dp_args.end());
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--exit-code-file", dir_ + "/exit-code", "--"});
    args.insert(args.end(), app.begin(), app.end());
  };
  if (spec.per_slot_args.empty()) {
    const int extra = spec.extra_context.empty() ? 0 : std::atoi(spec.extra_context[1].c_str());
    app_context(spec.slots - extra, {}, spec.app);
  } else {
    for (size_t i = 0; i < spec.per_slot_args.size(); ++i) {
      if (i) args.push_back(":");
      app_context(1, spec.per_slot_args[i],
                  i < spec.per_slot_app.size() ? spec.per_slot_app[i] : spec.app);
    }
  }
  if (!spec.extra_context.empty()) {
    args.push_back(":");
    args.insert(args.end(), spec.extra_context.begin(), spec.extra_context.end());
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = dir_ + "/mpirun.out";
  // A job test fails a node by hanging its rank at a named point and SIGKILLing its slot: the
  // coordinator's hang detector (docs/protect.md, "Hangs") would find the hang first and restart
  // the rank instead. Such a job runs without it unless the test sets RTFT_HANG_K itself.
  std::map<std::string, std::string> env = spec.env;
  if (env.count("RTFT_HANG_K") == 0 && HangsARank(spec)) env["RTFT_HANG_K"] = "0";
  // The straggler detector (docs/protect.md, "Stragglers") swaps a rank that works 20 % slower
  // than its peers for a spare: job tests run more ranks than CI's two cores beside another
  // test, where the scheduler may leave one behind for a window and use up the spare a test
  // counts on. It is off unless the test sets RTFT_STRAGGLER_PCT (protect_straggler_job_test
  // does, for a slow rank and for a clean run).
  if (env.count("RTFT_STRAGGLER_PCT") == 0) env["RTFT_STRAGGLER_PCT"] = "0";
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("RTFT_TEST_DIR", dir_.c_str(), 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    if (spec.nofile_soft > 0) {
      rlimit rl{static_cast<rlim_t>(spec.nofile_soft), static_cast<rlim_t>(spec.nofile_hard)};
      if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
    }
    FILE* f = std::fopen(out.c_str(), "w");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid_, pid_);
}

bool HangsARank(const JobSpec& spec) {
  auto hangs = [](const std::string& text) { return text.find(":hang") != std::string::npos; };
  for (const auto& [k, v] : spec.env)
    if (hangs(v)) return true;
  for (const auto& a : spec.app)
    if (hangs(a)) return true;
  for (const auto& app : spec.per_slot_app)
    for (const auto& a : app)
      if (hangs(a)) return true;
  return false;
}

void Job::SignalLauncher(int sig) const {
  if (pid_ > 0) kill(pid_, sig);
}

std::optional<int> Job::Wait(std::chrono::seconds timeout) {
  int status = 0;
  const bool done = WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                            std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!done) {
    // What held the launcher, for the failure message (leftovers()).
    leftovers_.clear();
    for (const ProcInfo& p : JobProcesses(dir_))
      leftovers_ += std::to_string(p.pid) + " " + p.comm + " state " + p.state + " (parent " +
                    std::to_string(p.ppid) + ", slot " + p.Env("RTFT_SLOT") + ", rank " +
                    p.Env("OMPI_COMM_WORLD_RANK") + ")\n";
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    KillLeftovers();
    return std::nullopt;
  }
  // No process of the job may outlive the launcher: give stragglers a moment to go, then record
  // what is left for the test to fail on, and kill it.
  std::vector<ProcInfo> left;
  WaitFor([&] { return (left = JobProcesses(dir_)).empty(); }, std::chrono::seconds(5));
  leftovers_.clear();
  for (const ProcInfo& p : left)
    leftovers_ += std::to_string(p.pid) + " " + p.comm + " (parent " + std::to_string(p.ppid) +
                  ", slot " + p.Env("RTFT_SLOT") + ")\n";
  kill(-pid_, SIGKILL);
  pid_ = -1;
  KillLeftovers();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int Job::JobExitCode() const {
  std::ifstream in(dir_ + "/exit-code");
  int code = -1;
  if (!(in >> code)) return -1;
  return code;
}

std::string Job::Output() const {
  std::ifstream in(dir_ + "/mpirun.out");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t Job::AgentOf(int slot) const {
  const char* rank_var = kind_ == Launcher::Kind::kHydra ? "PMI_RANK" : "OMPI_COMM_WORLD_RANK";
  for (const ProcInfo& p : JobProcesses(dir_))
    if (p.comm.rfind("dp-launch", 0) == 0 && p.Env(rank_var) == std::to_string(slot)) return p.pid;
  return 0;
}

bool Job::FindApp(int slot, long inner, pid_t* app, pid_t* agent) const {
  for (const ProcInfo& p : JobProcesses(dir_)) {
    if (p.comm != "launcher-test-a" || p.Env("RTFT_SLOT") != std::to_string(slot) ||
        p.nspid.empty() || p.nspid.back() != inner)
      continue;
    *app = p.pid;
    *agent = AgentOf(slot);
    return *agent > 0;
  }
  return false;
}

bool Job::FindRank(int rank, pid_t* app, pid_t* agent, int* slot) const {
  int found_slot = -1;
  long inner = -1;
  for (int s = 0; s < slots_; ++s) {
    for (const auto& l : LinesOf(dir_, s, "start")) {
      if (l.Int("rank") != rank) continue;
      found_slot = s;
      inner = l.Int("pid");
    }
  }
  if (found_slot < 0 || !FindApp(found_slot, inner, app, agent)) return false;
  if (slot) *slot = found_slot;
  return true;
}

bool Job::FindSpare(int slot, pid_t* app, pid_t* agent) const {
  long inner = -1;
  for (const auto& l : LinesOf(dir_, slot, "launched"))
    if (l.Get("env_role") == "spare") inner = l.Int("pid");
  return inner > 0 && FindApp(slot, inner, app, agent);
}

long Job::LastStep(int rank) const {
  long last = -1;
  for (int s = 0; s < slots_; ++s)
    for (const auto& l : LinesOf(dir_, s, "step"))
      if (l.Int("rank") == rank) last = std::max(last, l.Int("step"));
  return last;
}

std::string Job::Dump() const {
  std::string all = "--- mpirun output:\n" + Output();
  for (int s = 0; s < slots_; ++s) {
    std::ifstream in(dir_ + "/slot-" + std::to_string(s) + ".log");
    std::stringstream text;
    text << in.rdbuf();
    all += "--- slot " + std::to_string(s) + ":\n" + text.str();
  }
  return all;
}

}  // namespace rtft::launch::test
