// Test support for the launcher tests: runs a real `mpirun ... dp-launch ... -- rtft_test_app`
// job (Open MPI's mpirun or MPICH's Hydra mpiexec) in its own process group, and reads the
// per-slot logs the test application writes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rtft::launch::test {

// One `kind key=value ...` line of a test application log.
struct LogLine {
  std::string kind;
  std::map<std::string, std::string> kv;
  std::string Get(const std::string& key) const {
    auto it = kv.find(key);
    return it == kv.end() ? "" : it->second;
  }
  long Int(const std::string& key) const { return std::atol(Get(key).c_str()); }
};

std::vector<LogLine> ReadSlotLog(const std::string& dir, int slot);
// Lines of `kind` in slot's log.
std::vector<LogLine> LinesOf(const std::string& dir, int slot, const std::string& kind);
// Polls `pred` every 20 ms.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// Which MPI launcher starts the job, and the dp-launch built against its MPI.
struct Launcher {
  enum class Kind { kOpenMpi, kHydra };
  Kind kind = Kind::kOpenMpi;
  std::string mpiexec = "mpirun";
  std::string dp_launch = RTFT_DP_LAUNCH;
};

struct JobSpec {
  int slots = 3;
  std::vector<std::string> dp_args;        // dp-launch options
  std::map<std::string, std::string> env;  // for every process of the job
  // Open MPI: mpirun --enable-recovery; Hydra: mpiexec -disable-auto-cleanup.
  bool recovery = true;
  Launcher launcher;
  // MPMD: when not empty, per-slot extra dp-launch options (one app context per slot).
  std::vector<std::vector<std::string>> per_slot_args;
};

class Job {
 public:
  explicit Job(const std::string& dir) : dir_(dir) {}
  ~Job();
  void Start(const JobSpec& spec);
  // The launcher's exit status (the code, or 128 + signal); nullopt on timeout (the job is
  // killed).
  std::optional<int> Wait(std::chrono::seconds timeout);
  // The code slot 0 wrote to --exit-code-file; -1 when absent.
  int JobExitCode() const;
  std::string Output() const;  // the launcher's stdout and stderr

  // The pid (and its agent's, the parent) of the latest process that started with `rank`.
  bool FindRank(int rank, pid_t* app, pid_t* agent, int* slot = nullptr) const;
  // The pid and agent of the spare waiting on `slot`.
  bool FindSpare(int slot, pid_t* app, pid_t* agent) const;
  // Highest step logged by `rank` so far (-1: none).
  long LastStep(int rank) const;
  // Every line of every slot log, for failure messages.
  std::string Dump() const;

 private:
  void KillLeftovers() const;

  std::string dir_;
  int slots_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rtft::launch::test
