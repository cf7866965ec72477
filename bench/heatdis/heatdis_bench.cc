// `rtft-bench heatdis` (heatdis_bench.h): the solver's protection cost within one run, and a
// lost slot against checkpoint-restart, both read off the solver's own lines (its "bench" line,
// and the timestamp of its "recovered" line).
#include "bench/heatdis/heatdis_bench.h"
#include <CLI/CLI.hpp>

#include <signal.h>

#include <regex>

#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kJobTimeout{1800000};

// Until the job's fault point fired; an error when the job ended first (a slot lost to a loaded
// machine's missed heartbeats ends it early, say) instead of waiting for the job timeout.
Status WaitForFault(BenchJob& job) {
  bool ended = false;
  WaitUntil([&] { return job.FaultSlot() >= 0 || (ended = job.Wait(milliseconds(0)).ok()); },
            kJobTimeout);
  if (job.FaultSlot() >= 0) return Status::Ok();
  return Status::Internal(std::string(ended ? "the job ended" : "the job timed out") +
                          " before its fault point fired (see " + job.dir() + "/mpirun.out)");
}

// heatdis under `mpirun --enable-recovery dp-launch`, `ranks` active slots and a spare.
class HeatdisCommand final : public BenchCommand {
 public:
  const char* name() const override { return "heatdis"; }
  const char* help() const override {
    return "the heat-diffusion solver: iteration time with protection every K iterations against "
           "none (same run), and a lost slot's recovery against checkpoint-restart";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--program", program_, "rtft-heatdis or heatdis-c")->capture_default_str();
    cmd->add_option("--ranks", ranks_, "active ranks (plus one spare)")->capture_default_str();
    cmd->add_option("--rows", rows_, "grid rows")->capture_default_str();
    cmd->add_option("--cols", cols_, "grid columns")->capture_default_str();
    cmd->add_option("--protect-every", k_, "iterations per protected step K")
        ->capture_default_str();
    cmd->add_option("--blocks", blocks_, "steps per block (protected and unprotected alternate)")
        ->capture_default_str();
    cmd->add_option("--pairs", pairs_, "pairs of blocks per overhead run")->capture_default_str();
    cmd->add_option("--repeats", repeats_, "overhead runs")->capture_default_str();
    cmd->add_option("--l3-every", l3_every_, "L3 period (steps) of the recovery runs")
        ->capture_default_str();
    cmd->add_option("--fail-step", fail_step_, "the step a slot is lost in (recovery runs)")
        ->capture_default_str();
    cmd->add_option("--heartbeat-timeout-ms", heartbeat_timeout_ms_, "dp-launch heartbeat timeout")
        ->capture_default_str();
    cmd->add_flag("--overhead-only", overhead_only_,
                  "measure the overhead only (no recovery runs)");
  }
  int Run() override;

 private:
  std::vector<std::string> Args(int64_t iterations, const std::vector<std::string>& extra) const;
  Status Overhead(JsonLines* out, double* iter_s);
  // A job whose slot 1 stands at iteration `at` when its dp-launch is SIGKILLed (a spare takes
  // the rank), or, `whole_job`, when the whole job is killed and then started again from its
  // newest L3 version: when the failure was, how long until the first step ran again, and the
  // iteration it began with.
  struct Resumed {
    double failed_s = 0, recovered_s = 0;
    int64_t first_iteration = 0;
  };
  StatusOr<Resumed> FailedRun(const std::string& dir, int64_t at, bool whole_job);
  Status Recovery(JsonLines* out, double iter_s);

  std::string program_ = "rtft-heatdis";
  int ranks_ = 4, blocks_ = 4, pairs_ = 6, repeats_ = 3, l3_every_ = 10, fail_step_ = 25;
  int64_t rows_ = 2048, cols_ = 2048, k_ = 100;
  int heartbeat_timeout_ms_ = 1000;
  bool overhead_only_ = false;
};

std::vector<std::string> HeatdisCommand::Args(int64_t iterations,
                                              const std::vector<std::string>& extra) const {
  std::vector<std::string> a =
      DpLaunchArgs(ranks_ + 1, NextToSelf("dp-launch"),
                   {"--spares", "1", "--heartbeat-ms", "100", "--heartbeat-timeout-ms",
                    std::to_string(heartbeat_timeout_ms_)});
  a.insert(a.end(), {NextToSelf(program_), "--rows", std::to_string(rows_), "--cols",
                     std::to_string(cols_), "--iterations", std::to_string(iterations),
                     "--protect-every", std::to_string(k_), "--residual-every", "1000000"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

Status HeatdisCommand::Overhead(JsonLines* out, double* iter_s) {
  const int64_t iterations = int64_t(2) * pairs_ * blocks_ * k_;
  std::vector<double> on, off, pct, cpu_pct;
  for (int r = 0; r < repeats_; ++r) {
    Progress("heatdis: overhead run " + std::to_string(r + 1) + " of " + std::to_string(repeats_));
    RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
    BenchJob job(dir, ranks_ + 1);
    RTFT_RETURN_IF_ERROR(job.Start(Args(iterations, {"--bench-blocks", std::to_string(blocks_)}),
                                   {{"RTFT_COMM_GLOO_HOST", "127.0.0.1"}}));
    RTFT_RETURN_IF_ERROR(job.Wait(kJobTimeout));
    static const std::regex line(R"(bench protected_iter_s=([0-9.]+) unprotected_iter_s=([0-9.]+) )"
                                 R"(protected_cpu_s=([0-9.]+) unprotected_cpu_s=([0-9.]+))");
    std::smatch m;
    const std::string output = job.Output();
    if (!std::regex_search(output, m, line) || !(std::stod(m[2]) > 0))
      return Status::Internal("no timing from the overhead run (see " + dir + "/mpirun.out)");
    on.push_back(std::stod(m[1]));
    off.push_back(std::stod(m[2]));
    pct.push_back((on.back() / off.back() - 1) * 100);
    if (std::stod(m[4]) > 0) cpu_pct.push_back((std::stod(m[3]) / std::stod(m[4]) - 1) * 100);
    (void)RemoveTree(dir);
  }
  *iter_s = Median(on);
  const double overhead = Median(pct);
  out->Emit({{"name", "heatdis"},
             {"phase", "overhead"},
             {"program", program_},
             {"ranks", ranks_},
             {"rows", rows_},
             {"cols", cols_},
             {"protect_every", k_},
             {"iterations", iterations},
             {"blocks", blocks_},
             {"repeats", repeats_},
             {"iter_s_on", Median(on)},
             {"iter_s_off", Median(off)},
             {"overhead_pct", overhead},
             {"overhead_pct_runs", pct},
             {"cpu_overhead_pct", Median(cpu_pct)},
             {"cpu_overhead_pct_runs", cpu_pct},
             {"target_pct", 3},
             {"met", overhead <= 3}});
  return Status::Ok();
}

StatusOr<HeatdisCommand::Resumed> HeatdisCommand::FailedRun(const std::string& dir, int64_t at,
                                                            bool whole_job) {
  const std::string ckpt = dir + "/ckpt";
  const std::vector<std::string> l3 = {"--l3-every", std::to_string(l3_every_), "--ckpt-dir", ckpt};
  const int64_t iterations = at + 3 * k_;
  const std::map<std::string, std::string> env = {
      {"RTFT_COMM_GLOO_HOST", "127.0.0.1"},
      {"RTFT_FAULT", "1/heatdis.iteration@" + std::to_string(at) + ":hang"}};
  Resumed r;
  BenchJob job(dir + "/run", ranks_ + 1);
  RTFT_RETURN_IF_ERROR(EnsureDir(dir + "/run"));
  RTFT_RETURN_IF_ERROR(job.Start(Args(iterations, l3), env));
  RTFT_RETURN_IF_ERROR(WaitForFault(job));
  if (whole_job) {  // checkpoint-restart: every process of the job goes, then it starts again
    r.failed_s = NowUs() / 1e6;
    KillMarked(job.Marker());
  } else {
    const pid_t agent = SlotAgent(job.Marker(), 1);
    r.failed_s = NowUs() / 1e6;
    if (agent > 0) kill(agent, SIGKILL);
  }
  RTFT_RETURN_IF_ERROR(job.Wait(kJobTimeout));
  std::string output = job.Output();
  if (whole_job) {
    BenchJob again(dir + "/again", ranks_ + 1);
    RTFT_RETURN_IF_ERROR(EnsureDir(dir + "/again"));
    RTFT_RETURN_IF_ERROR(again.Start(Args(iterations, l3), {{"RTFT_COMM_GLOO_HOST", "127.0.0.1"}}));
    RTFT_RETURN_IF_ERROR(again.Wait(kJobTimeout));
    output = again.Output();
  }
  static const std::regex line(
      R"(recovered epoch \d+: iteration (\d+) again on \d+ ranks t=([0-9.]+))");
  std::smatch m;
  if (!std::regex_search(output, m, line))
    return Status::Internal("no recovery in the output (see " + dir + ")");
  r.first_iteration = std::stoll(m[1]);
  r.recovered_s = std::stod(m[2]) - r.failed_s;
  return r;
}

Status HeatdisCommand::Recovery(JsonLines* out, double iter_s) {
  // The middle of step fail_step_: half a step to do again after a recovery from L1.
  const int64_t at = int64_t(fail_step_) * k_ + k_ / 2;
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  Progress("heatdis: slot 1 lost at iteration " + std::to_string(at) + ", a spare takes it");
  RTFT_ASSIGN_OR_RETURN(Resumed lost, FailedRun(dir + "/lost", at, false));
  Progress("heatdis: checkpoint-restart, the job killed at iteration " + std::to_string(at));
  RTFT_ASSIGN_OR_RETURN(Resumed cr, FailedRun(dir + "/restart", at, true));
  // Until iteration `at` is done again: the recovery, then the iterations from where it resumed.
  const int64_t again = at - lost.first_iteration + 1, cr_again = at - cr.first_iteration + 1;
  const double resumed_s = lost.recovered_s + again * iter_s;
  const double restart_s = cr.recovered_s + cr_again * iter_s;
  out->Emit({{"name", "heatdis"},
             {"phase", "recovery"},
             {"program", program_},
             {"ranks", ranks_},
             {"protect_every", k_},
             {"l3_every", l3_every_},
             {"fail_iteration", at},
             {"iter_s", iter_s},
             {"recovered_s", lost.recovered_s},
             {"resumed_s", resumed_s},
             {"reexecuted_iterations", again - 1},
             {"restart_recovered_s", cr.recovered_s},
             {"restart_s", restart_s},
             {"restart_reexecuted_iterations", cr_again - 1},
             {"speedup", restart_s / resumed_s},
             {"target_speedup", 5},
             {"met", restart_s / resumed_s >= 5}});
  (void)RemoveTree(dir);
  return Status::Ok();
}

int HeatdisCommand::Run() {
  if (ranks_ < 2 || rows_ - 2 < ranks_ || cols_ < 3 || rows_ * cols_ > (int64_t(1) << 31) ||
      k_ < 2 || blocks_ < 2 || pairs_ < 1 || repeats_ < 1 || l3_every_ < 1 ||
      fail_step_ <= l3_every_) {
    Progress(
        "heatdis: --ranks >= 2, --rows - 2 >= --ranks, --cols >= 3, at most 2^31 cells, "
        "--protect-every >= 2, --blocks >= 2, --pairs >= 1, --repeats >= 1, "
        "1 <= --l3-every < --fail-step");
    return kExitUsage;
  }
  if (program_ != "rtft-heatdis" && program_ != "heatdis-c") {
    Progress("heatdis: --program is rtft-heatdis or heatdis-c");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", program_}); !missing.empty()) {
    Progress("heatdis: " + missing + " is not built");
    return kExitUsage;
  }
  JsonLines out;
  double iter_s = 0;
  Status s = Overhead(&out, &iter_s);
  if (s.ok() && !overhead_only_) s = Recovery(&out, iter_s);
  if (!s.ok()) {
    Progress("heatdis: " + s.ToString());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewHeatdisCommand() { return std::make_unique<HeatdisCommand>(); }

}  // namespace rtft::bench
