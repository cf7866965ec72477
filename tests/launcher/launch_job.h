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

// A process as /proc shows it to the test.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
  std::vector<long> nspid;  // its pid in each PID namespace, the test's first
  std::map<std::string, std::string> env;
  std::string Env(const std::string& name) const {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  }
};
// Every live process (zombies excluded) whose environment holds RTFT_TEST_DIR=<dir>: mpirun,
// the dp-launch agents, their keepers (comm "dp-keeper"), the applications and what they start.
std::vector<ProcInfo> JobProcesses(const std::string& dir);
bool Alive(pid_t pid);      // and not a zombie
pid_t ParentOf(pid_t pid);  // 0 when gone

std::vector<LogLine> ReadSlotLog(const std::string& dir, int slot);
// Lines of `kind` in slot's log.
std::vector<LogLine> LinesOf(const std::string& dir, int slot, const std::string& kind);
// The last of `lines`, or an empty line (its fields read "") when there is none: never the
// undefined back() of an empty vector, which crashed a test once its line was missing.
inline LogLine Last(const std::vector<LogLine>& lines) {
  return lines.empty() ? LogLine{} : lines.back();
}
// Polls `pred` every 20 ms.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
// What rtft-train printed: each rank's `[train R] done ... digest=D` and the count of its
// `[train R] recovered` lines.
void ReadTrainOutput(const std::string& output, std::map<int, std::string>* digests,
                     int* recoveries);

// Which MPI launcher starts the job, and the dp-launch built against its MPI.
// The dp-launch under test: this build's, or RTFT_TEST_DP_LAUNCH (to run the tests against
// another build, e.g. to see a test fail on an older one).
std::string DpLaunchUnderTest();

struct Launcher {
  enum class Kind { kOpenMpi, kHydra };
  Kind kind = Kind::kOpenMpi;
  std::string mpiexec = "mpirun";
  std::string dp_launch = DpLaunchUnderTest();
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
  // What dp-launch runs (after --): the test application, or a wrapper around it; with
  // per_slot_args, per_slot_app (when not empty) gives each slot's.
  std::vector<std::string> app = {RTFT_TEST_APP};
  std::vector<std::vector<std::string>> per_slot_app;
  // One more app context after the dp-launch ones (-np N PROGRAM ARGS): a slot that is no
  // dp-launch, e.g. one that dies before MPI_Init. Counts in `slots`.
  std::vector<std::string> extra_context;
  // More arguments for mpirun (before the app contexts).
  std::vector<std::string> launcher_args;
  // RLIMIT_NOFILE (soft, hard) for the whole job; 0: inherited.
  long nofile_soft = 0, nofile_hard = 0;
};

// Whether the job's faults (RTFT_FAULT, the application's arguments) hang a rank: Job::Start
// then runs it with the hang detector off (RTFT_HANG_K=0) unless the spec sets RTFT_HANG_K.
// Job::Start runs every job with the straggler detector off (RTFT_STRAGGLER_PCT=0) unless the
// spec sets RTFT_STRAGGLER_PCT.
bool HangsARank(const JobSpec& spec);

// The test application behind a shell that stays its parent (bash forks it and waits), as in
// `bash run.sh`.
std::vector<std::string> BehindShell();

class Job {
 public:
  explicit Job(const std::string& dir) : dir_(dir) {}
  ~Job();
  void Start(const JobSpec& spec);
  // Sends `sig` to the launcher (mpirun) itself.
  void SignalLauncher(int sig) const;
  // The launcher's exit status (the code, or 128 + signal); nullopt on timeout (the job is
  // killed).
  std::optional<int> Wait(std::chrono::seconds timeout);
  // The code slot 0 wrote to --exit-code-file; -1 when absent.
  int JobExitCode() const;
  std::string Output() const;  // the launcher's stdout and stderr

  // The pid (as the test sees it: the application runs in a PID namespace of its own) of the
  // live process that started last with `rank`, and its slot's dp-launch.
  bool FindRank(int rank, pid_t* app, pid_t* agent, int* slot = nullptr) const;
  // The live application logged on `slot` as `inner` (its own getpid()), and the slot's agent.
  bool FindApp(int slot, long inner, pid_t* app, pid_t* agent) const;
  // The pid and agent of the spare waiting on `slot`.
  bool FindSpare(int slot, pid_t* app, pid_t* agent) const;
  // The dp-launch of `slot` (0 when it is gone).
  pid_t AgentOf(int slot) const;
  // The job's processes still alive after the launcher exited (Wait() fills it), one per line.
  const std::string& leftovers() const { return leftovers_; }
  // Highest step logged by `rank` so far (-1: none).
  long LastStep(int rank) const;
  // Every line of every slot log, for failure messages.
  std::string Dump() const;

 private:
  void KillLeftovers() const;

  std::string dir_;
  int slots_ = 0;
  pid_t pid_ = -1;
  Launcher::Kind kind_ = Launcher::Kind::kOpenMpi;
  std::string leftovers_;
};

}  // namespace rtft::launch::test
