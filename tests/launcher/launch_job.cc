#include "launcher/launch_job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace rtft::launch::test {

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
  // Open MPI may put the processes it starts in groups of their own: kill what the logs name,
  // when it is still one of ours.
  for (int s = 0; s < slots_; ++s) {
    for (const auto& l : ReadSlotLog(dir_, s)) {
      for (const char* key : {"pid", "ppid"}) {
        const pid_t pid = static_cast<pid_t>(l.Int(key));
        if (pid <= 1) continue;
        std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
        std::string name;  // comm: the first 15 characters
        if ((comm >> name) && (name == "dp-launch" || name == "launcher-test-a"))
          kill(pid, SIGKILL);
      }
    }
  }
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
  std::vector<std::string> args = LauncherArgs(spec);
  auto app_context = [&](int np, const std::vector<std::string>& extra) {
    args.insert(args.end(), {"-np", std::to_string(np), spec.launcher.dp_launch});
    args.insert(args.end(), spec.dp_args.begin(), spec.dp_args.end());
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--exit-code-file", dir_ + "/exit-code", "--", RTFT_TEST_APP});
  };
  if (spec.per_slot_args.empty()) {
    app_context(spec.slots, {});
  } else {
    for (size_t i = 0; i < spec.per_slot_args.size(); ++i) {
      if (i) args.push_back(":");
      app_context(1, spec.per_slot_args[i]);
    }
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = dir_ + "/mpirun.out";
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("RTFT_TEST_DIR", dir_.c_str(), 1);
    for (const auto& [k, v] : spec.env) setenv(k.c_str(), v.c_str(), 1);
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

std::optional<int> Job::Wait(std::chrono::seconds timeout) {
  int status = 0;
  const bool done = WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                            std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!done) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return std::nullopt;
  }
  // Stray processes of the job (there should be none) go with the group.
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

bool Job::FindRank(int rank, pid_t* app, pid_t* agent, int* slot) const {
  bool found = false;
  for (int s = 0; s < slots_; ++s) {
    for (const auto& l : LinesOf(dir_, s, "start")) {
      if (l.Int("rank") != rank) continue;
      *app = static_cast<pid_t>(l.Int("pid"));
      *agent = static_cast<pid_t>(l.Int("ppid"));
      if (slot) *slot = s;
      found = true;
    }
  }
  return found;
}

bool Job::FindSpare(int slot, pid_t* app, pid_t* agent) const {
  bool found = false;
  for (const auto& l : LinesOf(dir_, slot, "launched")) {
    if (l.Get("env_role") != "spare") continue;
    *app = static_cast<pid_t>(l.Int("pid"));
    *agent = static_cast<pid_t>(l.Int("ppid"));
    found = true;
  }
  return found;
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
