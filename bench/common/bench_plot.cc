#include "bench/common/bench_plot.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <vector>

#include "bench/common/bench_util.h"

extern char** environ;  // for posix_spawnp: the plot script runs with our environment

namespace rtft::bench {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The source tree (build trees; this file is bench/common/bench_plot.cc), next to the
// executable's tree, or the installed copy.
std::string FindPlotScript() {
  std::vector<std::string> candidates = {Dirname(__FILE__) + "/../../scripts/plot-bench.py"};
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const std::string bin = Dirname(std::string(exe, static_cast<size_t>(n)));
    candidates.push_back(bin + "/../../scripts/plot-bench.py");
    candidates.push_back(bin + "/../share/rtft/plot-bench.py");
  }
  for (const std::string& c : candidates)
    if (IsFile(c)) return c;
  return "";
}

// Shown to the user only, never run by a shell.
std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `argv` (looked up in PATH) without a shell and waits; the exit code, or -1.
int RunProgram(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  if (::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

void WritePlot(const std::string& png_path, const std::vector<nlohmann::json>& lines) {
  std::string data_path = png_path;
  const size_t dot = data_path.rfind(".png");
  if (dot != std::string::npos && dot + 4 == data_path.size()) data_path.resize(dot);
  data_path += ".jsonl";
  {
    std::ofstream f(data_path);
    for (const auto& j : lines) f << j.dump() << "\n";
    if (!f) {
      Progress("note: could not write " + data_path + "; no plot");
      return;
    }
  }
  Progress("results written to " + data_path);
  const std::string script = FindPlotScript();
  if (script.empty()) {
    Progress("note: scripts/plot-bench.py not found; no plot");
    return;
  }
  // An argument vector, never a shell command: the paths are the user's and may hold anything.
  const std::vector<std::string> argv = {"python3", script, data_path, png_path};
  if (RunProgram(argv) == 0) {
    Progress("plot written to " + png_path);
  } else {
    Progress("note: no plot drawn (needs python3 with matplotlib); run python3 " +
             ShellQuote(script) + " " + ShellQuote(data_path) + " " + ShellQuote(png_path) +
             " where it is installed");
  }
}

}  // namespace rtft::bench
