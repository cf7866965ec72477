// `rtft-bench recovery`: one failure of each kind at a given step of rtft-train (4 ranks and a
// spare under `mpirun --enable-recovery dp-launch`, L3 every 100 steps), against
// checkpoint-restart of the same job: the whole job killed at the same step, started again, the
// newest L3 version loaded and the lost steps replayed. Each figure is read off the trainer's
// timestamped lines (docs/protect.md, "Measured").
#include "tools/rtft_bench/recovery_bench.h"

#include <signal.h>
#include <unistd.h>

#include <regex>

#include "tools/rtft_bench/bench_job.h"
#include "tools/rtft_bench/bench_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// The first `[train R] ...` line matching `pattern` (one capture group at most besides t): its
// wall time in seconds, or -1.
double FirstTime(const std::string& out, const std::string& pattern, std::string* group = nullptr) {
  const std::regex re(pattern + R"(.* t=([0-9.]+))");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return -1;
  if (group != nullptr && m.size() > 2) *group = m[1];
  return std::stod(m[m.size() - 1]);
}

class RecoveryCommand final : public BenchCommand {
 public:
  const char* name() const override { return "recovery"; }
  const char* help() const override {
    return "recovery: a process crash and a lost slot at a step of rtft-train, against "
           "checkpoint-restart (whole job killed, restarted from L3, lost steps replayed)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--step", step_, "the step the failure comes in")->capture_default_str();
    cmd->add_option("--l3-every", l3_every_, "L3 period of every run (steps)")
        ->capture_default_str();
    cmd->add_option("--ranks", ranks_, "active ranks (plus one spare)")->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_,
                    "samples per rank and step (0: the batch of a 0.3 s step here)")
        ->capture_default_str();
    cmd->add_option("--heartbeat-timeout-ms", heartbeat_timeout_ms_, "dp-launch heartbeat timeout")
        ->capture_default_str();
    cmd->add_option("--tp", tp_,
                    "tensor-parallel degree of rtft-train (--ranks must be a "
                    "multiple of tp x pp)")
        ->capture_default_str();
    cmd->add_option("--pp", pp_, "pipeline-parallel degree of rtft-train")->capture_default_str();
  }
  int Run() override;

 private:
  std::vector<std::string> Args(const std::string& ckpt, const std::string& fault) const;
  // Runs the job until it ends; `at_fault` runs once the fault point fired (with its slot).
  StatusOr<std::string> RunJob(const std::string& dir, const std::vector<std::string>& args,
                               const std::function<long long(BenchJob&, int)>& at_fault,
                               long long* failed_us);
  Status Failure(const std::string& kind, JsonLines* out);
  StatusOr<double> CheckpointRestart(double* step_s);

  int step_ = 150, l3_every_ = 100, ranks_ = 4, hidden_ = 1024, batch_ = 0;
  int heartbeat_timeout_ms_ = 1000;
  int tp_ = 1, pp_ = 1;
  double restart_s_ = -1;
};

std::vector<std::string> RecoveryCommand::Args(const std::string& ckpt,
                                               const std::string& fault) const {
  std::vector<std::string> a = TrainJobArgs(
      ranks_, hidden_, batch_,
      {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", std::to_string(heartbeat_timeout_ms_)},
      {"--steps", std::to_string(step_ + 3), "--log-every", "1", "--l3-every",
       std::to_string(l3_every_), "--ckpt-dir", ckpt, "--tp", std::to_string(tp_), "--pp",
       std::to_string(pp_)});
  if (!fault.empty()) a.insert(a.end(), {"--fault", fault});
  return a;
}

StatusOr<std::string> RecoveryCommand::RunJob(
    const std::string& dir, const std::vector<std::string>& args,
    const std::function<long long(BenchJob&, int)>& at_fault, long long* failed_us) {
  BenchJob job(dir, ranks_ + 1);
  RTFT_RETURN_IF_ERROR(job.Start(args));
  if (at_fault) {
    if (!WaitUntil([&] { return job.FaultSlot() >= 0; }, milliseconds(1800000)))
      return Status::DeadlineExceeded("the fault point never fired (see " + dir + ")");
    *failed_us = at_fault(job, job.FaultSlot());
  }
  RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(1800000)));
  return job.Output();
}

// The failure-free part of a job, killed whole at the failure step, then the job started again:
// from the kill until step `step_` completes again.
StatusOr<double> RecoveryCommand::CheckpointRestart(double* step_s) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  const std::string ckpt = dir + "/ckpt";
  long long killed = 0;
  Progress("recovery: checkpoint-restart, the job killed at step " + std::to_string(step_));
  // The whole job stops at the failure step (every process of it is killed).
  {
    BenchJob job(dir, ranks_ + 1);
    RTFT_RETURN_IF_ERROR(
        job.Start(Args(ckpt, "0:protect.update@" + std::to_string(step_ + 1) + ":hang")));
    if (!WaitUntil([&] { return job.FaultSlot() >= 0; }, milliseconds(1800000)))
      return Status::DeadlineExceeded("the job never reached step " + std::to_string(step_));
    const std::string out = job.Output();
    const double step0 = FirstTime(out, R"(\[train 0\] step 10 )");
    const double step1 = FirstTime(out, R"(\[train 0\] step )" + std::to_string(step_ - 10) + " ");
    if (step0 > 0 && step1 > step0) *step_s = (step1 - step0) / (step_ - 20);
    killed = NowUs();
    KillMarked(job.Marker());
  }  // the destructor reaps what is left
  Progress("recovery: checkpoint-restart, the job started again from its newest L3 version");
  BenchJob again(dir + "/again", ranks_ + 1);
  RTFT_RETURN_IF_ERROR(EnsureDir(dir + "/again"));
  RTFT_RETURN_IF_ERROR(again.Start(Args(ckpt, "")));
  RTFT_RETURN_IF_ERROR(again.Wait(milliseconds(1800000)));
  const std::string out = again.Output();
  const double done = FirstTime(out, R"(\[train 0\] step )" + std::to_string(step_) + " ");
  if (done < 0)
    return Status::Internal("the restarted job never completed step " + std::to_string(step_) +
                            " (see " + dir + ")");
  (void)RemoveTree(dir);
  return done - killed / 1e6;
}

Status RecoveryCommand::Failure(const std::string& kind, JsonLines* out) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  const bool slot = kind == "slot";
  const std::string fault =
      "2:protect.update@" + std::to_string(step_ + 1) + (slot ? ":hang" : ":kill");
  Progress("recovery: " + kind + " failure at step " + std::to_string(step_));
  long long failed_us = 0;
  std::function<long long(BenchJob&, int)> at_fault = [&](BenchJob& job, int s) -> long long {
    if (!slot) return 0;  // the application killed itself: its fault line has the time
    const pid_t agent = SlotAgent(job.Marker(), s);
    const long long t = NowUs();
    if (agent > 0) kill(agent, SIGKILL);
    return t;
  };
  RTFT_ASSIGN_OR_RETURN(std::string output,
                        RunJob(dir, Args(dir + "/ckpt", fault), at_fault, &failed_us));
  double failed = failed_us / 1e6;
  if (!slot) {
    const std::regex fired(R"(fault protect\.update kill .* t=(\d+))");
    std::smatch m;
    const std::string faults = ReadFile(dir + "/faults.log");
    if (!std::regex_search(faults, m, fired)) return Status::Internal("no fault line");
    failed = std::stoll(m[1]) / 1e6;
  }
  const double event = FirstTime(output, R"(\[train \d+\] event epoch=2)");
  std::string rollback;
  FirstTime(output, R"(\[train \d+\] recovered epoch=\d+ step=(\d+))", &rollback);
  const double resumed = FirstTime(output, R"(\[train 0\] step )" + std::to_string(step_) + " ");
  const double step0 = FirstTime(output, R"(\[train 0\] step 10 )");
  const double step1 = FirstTime(output, R"(\[train 0\] step )" + std::to_string(step_ - 10) + " ");
  if (event < 0 || resumed < 0 || rollback.empty())
    return Status::Internal("the " + kind + " run did not recover (see " + dir + ")");
  const double step_s = (step1 - step0) / (step_ - 20);
  const double detect_s = event - failed, resumed_s = resumed - failed;
  const int reexecuted = std::max(0, step_ - std::stoi(rollback));
  if (restart_s_ < 0) {
    double restart_step_s = 0;
    RTFT_ASSIGN_OR_RETURN(restart_s_, CheckpointRestart(&restart_step_s));
  }
  // What the recovery moved (every rank counts what it sent) and how long its stages took (the
  // slowest rank's, from the failure event).
  static const std::regex recovered(
      R"(\[train \d+\] recovered .* bytes=(\d+) event_s=[0-9.]+ agree_s=([0-9.]+) )"
      R"(rebuild_s=([0-9.]+) transfer_s=([0-9.]+))");
  double bytes_moved = 0, agree_s = 0, rebuild_s = 0, transfer_s = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), recovered);
       it != std::sregex_iterator(); ++it) {
    bytes_moved += std::stod((*it)[1]);
    agree_s = std::max(agree_s, std::stod((*it)[2]));
    rebuild_s = std::max(rebuild_s, std::stod((*it)[3]));
    transfer_s = std::max(transfer_s, std::stod((*it)[4]));
  }
  const double hb = heartbeat_timeout_ms_ / 1000.0;
  const double detect_target = slot ? 1.5 * hb : 0.05;
  const double resumed_target = slot ? detect_s + 1.5 : 1.5;
  const double speedup_target = slot ? 5 : 10;
  const double speedup = restart_s_ / resumed_s;
  out->Emit({{"name", "recovery"},
             {"failure", slot ? "slot" : "process"},
             {"slots", ranks_ + 1},
             {"step", step_},
             {"batch", batch_},
             {"layout", std::to_string(tp_) + "x" + std::to_string(pp_) + "x" +
                            std::to_string(ranks_ / (tp_ * pp_))},
             {"bytes_moved", bytes_moved},
             {"agree_s", agree_s},
             {"rebuild_s", rebuild_s},
             {"transfer_s", transfer_s},
             {"step_s", step_s},
             {"detect_s", detect_s},
             {"resumed_s", resumed_s},
             {"reexecuted_steps", reexecuted},
             {"restart_s", restart_s_},
             {"speedup", speedup},
             {"targets",
              {{"detect_s", detect_target},
               {"resumed_s", resumed_target},
               {"speedup", speedup_target},
               {"reexecuted_steps", 1}}},
             {"met",
              {{"detect_s", detect_s <= detect_target},
               {"resumed_s", resumed_s <= resumed_target},
               {"speedup", speedup >= speedup_target},
               {"reexecuted_steps", reexecuted <= 1}}}});
  (void)RemoveTree(dir);
  return Status::Ok();
}

int RecoveryCommand::Run() {
  if (step_ < 30 || l3_every_ < 1 || l3_every_ >= step_ || ranks_ < 3) {
    Progress("recovery: --step >= 30, 1 <= --l3-every < --step, --ranks >= 3");
    return kExitUsage;
  }
  if (tp_ < 1 || pp_ < 1 || ranks_ % (tp_ * pp_) != 0 || ranks_ / (tp_ * pp_) < 2) {
    Progress("recovery: --tp x --pp must divide --ranks with two data-parallel replicas or more");
    return kExitUsage;
  }
  if ((tp_ > 1 || pp_ > 1) && batch_ == 0) {
    Progress("recovery: give --batch with --tp/--pp (the calibration runs the flat trainer)");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("recovery: " + missing + " is not built");
    return kExitUsage;
  }
  if (batch_ < 0) {
    Progress("recovery: --batch >= 0");
    return kExitUsage;
  }
  if (batch_ == 0) {
    auto b = CalibrateBatch(ranks_, hidden_, 0.3);
    if (!b.ok()) {
      Progress("recovery: " + b.status().ToString());
      return kExitFailed;
    }
    batch_ = *b;
    Progress("recovery: batch " + std::to_string(batch_) + " for a step of about 0.3 s");
  }
  JsonLines out;
  for (const std::string kind : {"process", "slot"}) {
    const Status s = Failure(kind, &out);
    if (!s.ok()) {
      Progress("recovery: " + s.ToString());
      return kExitFailed;
    }
  }
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewRecoveryCommand() { return std::make_unique<RecoveryCommand>(); }

}  // namespace rtft::bench
