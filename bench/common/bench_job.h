// What the benchmarks that run real jobs share (comm, protect, recovery): one `mpirun
// --enable-recovery dp-launch ... -- PROGRAM` job started in its own process group, its slots'
// `kind key=value ... t=<us>` logs read back, and its processes found through /proc (dp-launch
// runs applications in PID namespaces of their own, so the pids they log are not this process's).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rtft/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace rtft::bench {

using Fields = std::map<std::string, std::string>;

long long NowUs();  // wall clock, microseconds: the clock the applications log with
std::string SelfPath();
// The program `name` in rtft-bench's own folder (build/bin/).
std::string NextToSelf(const std::string& name);
// The first of `names` (next to rtft-bench) that is not an executable, or empty when all are.
std::string MissingTool(const std::vector<std::string>& names);
std::string ReadFile(const std::string& path);
// The `kind key=value` lines of <dir>/slot-<slot>.log that start with `kind`.
std::vector<Fields> Lines(const std::string& dir, int slot, const std::string& kind);
long long Num(const Fields& kv, const char* key);
double Real(const Fields& kv, const char* key);
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// The job's process named `comm` on `slot` (its environment holds `marker` and RTFT_SLOT=slot).
pid_t SlotProcess(const std::string& marker, int slot, const std::string& comm);
// Every process whose environment holds `marker`.
void KillMarked(const std::string& marker);
// The dp-launch running `pid` (its parent, or further up: a keeper may stand between).
pid_t AgentOf(pid_t pid);
// The dp-launch of `slot` of the job marked `marker`.
pid_t SlotAgent(const std::string& marker, int slot);

// `mpirun --bind-to none --oversubscribe --enable-recovery -np SLOTS DP_LAUNCH DP_ARGS... --`:
// the start of every benchmark job's command; the application and its arguments follow.
std::vector<std::string> DpLaunchArgs(int slots, const std::string& dp_launch,
                                      const std::vector<std::string>& dp_args);
// The `mpirun --enable-recovery -np ranks+1 dp-launch --spares 1 -- rtft-train ...` command of
// the protect and recovery benchmarks, `dp_extra` before `--`, `train_extra` after the
// trainer's --hidden and --batch. The straggler detector is off (--straggler-pct 0) unless
// `dp_extra` sets it.
std::vector<std::string> TrainJobArgs(int ranks, int hidden, int batch,
                                      const std::vector<std::string>& dp_extra,
                                      const std::vector<std::string>& train_extra);
// What one rtft-train job's `[train 0] done` line says: rank 0's mean step time and its state.
struct TrainTimes {
  double step_s = 0;
  uint64_t state_bytes = 0;
};
// Runs TrainJobArgs(ranks, hidden, batch, {}, train_extra) in `dir` (left there for the caller
// to check and remove) and reads rank 0's done line; an error when the job did not finish.
StatusOr<TrainTimes> RunTrainTimed(const std::string& dir, int ranks, int hidden, int batch,
                                   const std::vector<std::string>& train_extra,
                                   std::chrono::milliseconds timeout);
// The batch for which an unprotected step of `ranks` ranks takes about `step_s` on this machine:
// short runs at probe batches, each scaled from the last until the batch settles (the figures
// mean nothing for a step chosen to flatter them: docs/benchmarks.md asks for 0.2 to 0.5 s).
StatusOr<int> CalibrateBatch(int ranks, int hidden, double step_s,
                             const std::vector<std::string>& train_extra = {});

// Where the protect and recovery benchmarks' trainer runs: `--device cpu|cuda`, and on the GPU
// `--comm nccl|gloo` (gloo where ranks share one GPU: NCCL refuses two ranks on one device) and
// `--offload` (the optimizer's state in host memory).
struct TrainDevice {
  std::string device = "cpu";
  std::string comm = "gloo";
  bool offload = false;
  bool cuda() const { return device == "cuda"; }
  // Its command-line options (--device, --comm, and --offload where `offload`) on `cmd`.
  void AddFlags(CLI::App* cmd, bool offload = true);
  // The trainer's options for it (none on the CPU).
  std::vector<std::string> Args() const;
  // "cpu", "cuda/gloo", "cuda/nccl/offload", ...: the benchmarks' `device` field.
  std::string Name() const;
};

class BenchJob {
 public:
  BenchJob(std::string dir, int slots) : dir_(std::move(dir)), slots_(slots) {}
  ~BenchJob();  // kills what is left of the job
  // argv[0] is looked up in PATH; stdout and stderr go to <dir>/mpirun.out. The job's processes
  // get RTFT_FAULT_LOG=<dir>/faults.log, which also marks them (Marker()).
  Status Start(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {});
  // The launcher's exit, or kDeadlineExceeded (the job is left running: the destructor kills it).
  Status Wait(std::chrono::milliseconds timeout);
  std::string Output() const { return ReadFile(dir_ + "/mpirun.out"); }
  std::string Marker() const { return "RTFT_FAULT_LOG=" + dir_ + "/faults.log"; }
  // The slot named by the first fault line, once one was written (-1 until then).
  int FaultSlot() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int slots_;
  pid_t pid_ = -1;
};

}  // namespace rtft::bench
