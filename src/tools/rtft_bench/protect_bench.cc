#include "tools/rtft_bench/protect_bench.h"

#include <regex>

#include "tools/rtft_bench/bench_job.h"
#include "tools/rtft_bench/bench_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

class ProtectCommand final : public BenchCommand {
 public:
  const char* name() const override { return "protect"; }
  const char* help() const override {
    return "per-step protection: rtft-train with and without L1 + L2 snapshots and replicas "
           "(4 ranks + a spare under mpirun + dp-launch)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--ranks", ranks_, "active ranks")->capture_default_str();
    cmd->add_option("--steps", steps_, "steps per run")->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_, "samples per rank and step")->capture_default_str();
    cmd->add_option("--repeats", repeats_, "runs of each variant, alternated")
        ->capture_default_str();
    cmd->add_option("--pair", pair_,
                    "CPUS_A:CPUS_B (taskset lists, e.g. 0,1:2,3): run the two variants at the "
                    "same time, one on each CPU set, swapping sets at each repeat, so that what "
                    "slows the machine down slows both; the overhead is then the median of the "
                    "repeats' ratios");
  }
  int Run() override;

 private:
  // One run's job, confined to `cpus` unless empty; Finish reads the step and CPU times and the
  // model's size from its output.
  StatusOr<std::unique_ptr<BenchJob>> StartRun(bool protect, const std::string& cpus);
  struct RunTimes {
    double step_s = 0;  // rank 0's mean step time
    double cpu_s = 0;   // CPU time per step, every thread of a rank, mean of the ranks
  };
  StatusOr<RunTimes> Finish(BenchJob* job, uint64_t* params);

  int ranks_ = 4, steps_ = 60, hidden_ = 1024, batch_ = 36, repeats_ = 3;
  std::string pair_;
};

StatusOr<std::unique_ptr<BenchJob>> ProtectCommand::StartRun(bool protect,
                                                             const std::string& cpus) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  auto job = std::make_unique<BenchJob>(dir, ranks_ + 1);
  std::vector<std::string> args;
  if (!cpus.empty()) args = {"taskset", "-c", cpus};
  for (const std::string& a : {std::string("mpirun"),
                               std::string("--bind-to"),
                               std::string("none"),
                               std::string("--oversubscribe"),
                               std::string("--enable-recovery"),
                               std::string("-np"),
                               std::to_string(ranks_ + 1),
                               NextToSelf("dp-launch"),
                               std::string("--spares"),
                               std::string("1"),
                               std::string("--"),
                               NextToSelf("rtft-train"),
                               std::string("--steps"),
                               std::to_string(steps_),
                               std::string("--hidden"),
                               std::to_string(hidden_),
                               std::string("--batch"),
                               std::to_string(batch_),
                               std::string("--log-every"),
                               std::string("1000000")})
    args.push_back(a);
  if (!protect) args.push_back("--no-protect");
  RTFT_RETURN_IF_ERROR(job->Start(args));
  return job;
}

StatusOr<ProtectCommand::RunTimes> ProtectCommand::Finish(BenchJob* job, uint64_t* params) {
  RTFT_RETURN_IF_ERROR(job->Wait(milliseconds(1800000)));
  const std::string out = job->Output();
  static const std::regex done(R"(\[train (\d+)\] done .* step_s=([0-9.]+) cpu_step_s=([0-9.]+))");
  static const std::regex start(R"(\[train 0\] start .* params=(\d+))");
  RunTimes t;
  int ranks = 0;
  bool rank0 = false;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), done); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1] == "0") {
      t.step_s = std::stod((*it)[2]);
      rank0 = true;
    }
    t.cpu_s += std::stod((*it)[3]);
    ++ranks;
  }
  if (!rank0 || ranks != ranks_)
    return Status::Internal("the trainer did not finish (see " + job->dir() + "/mpirun.out)");
  t.cpu_s /= ranks;
  std::smatch m;
  if (std::regex_search(out, m, start)) *params = std::stoull(m[1]);
  (void)RemoveTree(job->dir());
  return t;
}

int ProtectCommand::Run() {
  if (ranks_ < 1 || steps_ < 8 || repeats_ < 1) {
    Progress("protect: --ranks >= 1, --steps >= 8, --repeats >= 1");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("protect: " + missing + " is not built");
    return kExitUsage;
  }
  std::string cpus[2];
  if (!pair_.empty()) {
    const size_t colon = pair_.find(':');
    static const std::regex list(R"([0-9]+([-,][0-9]+)*)");
    if (colon == std::string::npos || !std::regex_match(pair_.substr(0, colon), list) ||
        !std::regex_match(pair_.substr(colon + 1), list)) {
      Progress("protect: --pair takes two CPU lists, CPUS_A:CPUS_B (for example 0,1:2,3)");
      return kExitUsage;
    }
    cpus[0] = pair_.substr(0, colon);
    cpus[1] = pair_.substr(colon + 1);
  }
  std::vector<double> on, off, ratios, cpu_on, cpu_off;
  uint64_t params = 0;
  for (int r = 0; r < repeats_; ++r) {
    // Paired: both variants at once, on CPU sets swapped at each repeat. Else one after the
    // other, the order swapped at each repeat.
    std::unique_ptr<BenchJob> jobs[2];
    RunTimes step[2];  // [off, on]
    for (int i = 0; i < 2; ++i) {
      const bool protect = (i + r) % 2 == 1;
      Progress(std::string("protect: run ") + std::to_string(r + 1) + ", protection " +
               (protect ? "on" : "off") + (pair_.empty() ? "" : " on CPUs " + cpus[i]));
      auto job = StartRun(protect, cpus[i]);
      Status s = job.status();
      if (s.ok()) jobs[i] = std::move(*job);
      if (s.ok() && pair_.empty()) {
        auto t = Finish(jobs[i].get(), &params);
        s = t.status();
        if (s.ok()) step[protect] = *t;
      }
      if (!s.ok()) {
        Progress("protect: " + s.ToString());
        return kExitFailed;
      }
    }
    for (int i = 0; i < 2 && !pair_.empty(); ++i) {
      const bool protect = (i + r) % 2 == 1;
      auto t = Finish(jobs[i].get(), &params);
      if (!t.ok()) {
        Progress("protect: " + t.status().ToString());
        return kExitFailed;
      }
      step[protect] = *t;
    }
    off.push_back(step[0].step_s);
    on.push_back(step[1].step_s);
    ratios.push_back(step[1].step_s / step[0].step_s);
    cpu_off.push_back(step[0].cpu_s);
    cpu_on.push_back(step[1].cpu_s);
  }
  const double step_on = Median(on), step_off = Median(off);
  // Paired runs shared the machine's state: the ratio within each pair is the better estimate.
  const double overhead = ((pair_.empty() ? step_on / step_off : Median(ratios)) - 1.0) * 100.0;
  JsonLines out;
  out.Emit({{"name", "protect"},
            {"ranks", ranks_},
            {"params", params},
            {"steps", steps_},
            {"repeats", repeats_},
            {"paired", !pair_.empty()},
            {"step_s_off", step_off},
            {"step_s_on", step_on},
            {"step_s_off_runs", off},
            {"step_s_on_runs", on},
            {"overhead_pct", overhead},
            {"cpu_step_s_off", Median(cpu_off)},
            {"cpu_step_s_on", Median(cpu_on)},
            {"cpu_overhead_pct", (Median(cpu_on) / Median(cpu_off) - 1.0) * 100.0},
            {"target_pct", 3.0},
            {"met", overhead <= 3.0}});
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewProtectCommand() { return std::make_unique<ProtectCommand>(); }

}  // namespace rtft::bench
