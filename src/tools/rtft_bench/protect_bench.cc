#include "tools/rtft_bench/protect_bench.h"

#include <unistd.h>

#include <regex>

#include "tools/rtft_bench/bench_job.h"
#include "tools/rtft_bench/bench_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

std::string NextTo(const std::string& name) {
  const std::string self = SelfPath();
  return self.substr(0, self.rfind('/')) + "/" + name;
}

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
  }
  int Run() override;

 private:
  // Mean step time of rank 0 in one run, and the model's size.
  StatusOr<double> OneRun(bool protect, uint64_t* params);

  int ranks_ = 4, steps_ = 40, hidden_ = 1024, batch_ = 24, repeats_ = 3;
};

StatusOr<double> ProtectCommand::OneRun(bool protect, uint64_t* params) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  BenchJob job(dir, ranks_ + 1);
  std::vector<std::string> args = {"mpirun",
                                   "--bind-to",
                                   "none",
                                   "--oversubscribe",
                                   "--enable-recovery",
                                   "-np",
                                   std::to_string(ranks_ + 1),
                                   NextTo("dp-launch"),
                                   "--spares",
                                   "1",
                                   "--",
                                   NextTo("rtft-train"),
                                   "--steps",
                                   std::to_string(steps_),
                                   "--hidden",
                                   std::to_string(hidden_),
                                   "--batch",
                                   std::to_string(batch_),
                                   "--log-every",
                                   "1000000"};
  if (!protect) args.push_back("--no-protect");
  RTFT_RETURN_IF_ERROR(job.Start(args));
  RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(1800000)));
  const std::string out = job.Output();
  static const std::regex done(R"(\[train 0\] done .* step_s=([0-9.]+))");
  static const std::regex start(R"(\[train 0\] start .* params=(\d+))");
  std::smatch m;
  if (!std::regex_search(out, m, done))
    return Status::Internal("the trainer did not finish (see " + dir + "/mpirun.out)");
  const double step_s = std::stod(m[1]);
  if (std::regex_search(out, m, start)) *params = std::stoull(m[1]);
  (void)RemoveTree(dir);
  return step_s;
}

int ProtectCommand::Run() {
  if (ranks_ < 1 || steps_ < 8 || repeats_ < 1) {
    Progress("protect: --ranks >= 1, --steps >= 8, --repeats >= 1");
    return kExitUsage;
  }
  for (const char* tool : {"dp-launch", "rtft-train"}) {
    if (access(NextTo(tool).c_str(), X_OK) != 0) {
      Progress("protect: " + NextTo(tool) + " is not built");
      return kExitUsage;
    }
  }
  std::vector<double> on, off;
  uint64_t params = 0;
  for (int r = 0; r < repeats_; ++r) {
    for (bool protect : {false, true}) {
      Progress(std::string("protect: run ") + std::to_string(r + 1) + ", protection " +
               (protect ? "on" : "off"));
      auto s = OneRun(protect, &params);
      if (!s.ok()) {
        Progress("protect: " + s.status().ToString());
        return kExitFailed;
      }
      (protect ? on : off).push_back(*s);
    }
  }
  const double step_on = Median(on), step_off = Median(off);
  const double overhead = (step_on / step_off - 1.0) * 100.0;
  JsonLines out;
  out.Emit({{"name", "protect"},
            {"ranks", ranks_},
            {"params", params},
            {"steps", steps_},
            {"repeats", repeats_},
            {"step_s_off", step_off},
            {"step_s_on", step_on},
            {"step_s_off_runs", off},
            {"step_s_on_runs", on},
            {"overhead_pct", overhead},
            {"target_pct", 3.0},
            {"met", overhead <= 3.0}});
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewProtectCommand() { return std::make_unique<ProtectCommand>(); }

}  // namespace rtft::bench
