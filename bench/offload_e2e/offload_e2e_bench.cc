#include "bench/offload_e2e/offload_e2e_bench.h"
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <map>

#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// The trainer's options of each variant, after --device cuda --comm C.
const std::map<std::string, std::vector<std::string>>& Variants() {
  static const auto* v = new std::map<std::string, std::vector<std::string>>{
      {"gpu", {}}, {"interleaved", {"--offload"}}, {"cpu", {"--offload", "--offload-mode", "cpu"}}};
  return *v;
}

class OffloadE2eCommand final : public BenchCommand {
 public:
  const char* name() const override { return "offload-e2e"; }
  const char* help() const override {
    return "offloaded optimizer end to end: rtft-train --device cuda's iteration time with the "
           "optimizer resident on the GPU, offloaded and interleaved (--offload), and offloaded "
           "with the update on the CPU only (variants interleaved over repeats; needs a GPU)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--ranks", ranks_, "active ranks (with a spare, under dp-launch)")
        ->capture_default_str();
    cmd->add_option("--steps", steps_, "steps per run (the first three are not timed)")
        ->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_,
                    "samples per rank and step (0: the batch of a --step-s step of the "
                    "GPU-resident variant here)")
        ->capture_default_str();
    cmd->add_option("--step-s", step_s_, "the step time --batch 0 aims at")->capture_default_str();
    cmd->add_option("--comm", comm_, "nccl, or gloo (ranks sharing one GPU)")
        ->check(CLI::IsMember({"nccl", "gloo"}))
        ->capture_default_str();
    cmd->add_option("--repeats", repeats_, "runs of each variant")->capture_default_str();
  }
  int Run() override;

 private:
  std::vector<std::string> DeviceArgs() const { return {"--device", "cuda", "--comm", comm_}; }

  int ranks_ = 1, steps_ = 40, hidden_ = 16384, batch_ = 0, repeats_ = 3;
  double step_s_ = 0.3;
  std::string comm_ = "nccl";
};

int OffloadE2eCommand::Run() {
  if (ranks_ < 1 || repeats_ < 1 || steps_ < 8 || hidden_ < 1 || batch_ < 0 || !(step_s_ > 0)) {
    Progress(
        "offload-e2e: --ranks >= 1, --repeats >= 1, --steps >= 8, --hidden >= 1, --batch >= 0, "
        "--step-s > 0");
    return kExitUsage;
  }
  if (comm_ == "nccl" && ranks_ > 1) {
    Progress("offload-e2e: NCCL takes one rank per GPU: --comm gloo for ranks sharing one GPU");
    return kExitUsage;
  }
  if (const Status gpu = CheckGpuUsable(); !gpu.ok()) {
    Progress("offload-e2e: needs a GPU (the GPU-resident optimizer is a variant): " +
             gpu.ToString());
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("offload-e2e: " + missing + " is not built");
    return kExitUsage;
  }
  int batch = batch_;
  if (batch == 0) {
    auto b = CalibrateBatch(ranks_, hidden_, step_s_, DeviceArgs());
    if (!b.ok()) {
      Progress("offload-e2e: " + b.status().ToString());
      return kExitFailed;
    }
    batch = *b;
  }
  std::map<std::string, std::vector<double>> steps;
  for (int r = 0; r < repeats_; ++r) {
    for (const auto& [variant, extra] : Variants()) {
      Progress("offload-e2e: run " + std::to_string(r + 1) + " of " + std::to_string(repeats_) +
               ", " + variant);
      auto dir = MakeScratchDir("/tmp");
      if (!dir.ok()) {
        Progress("offload-e2e: " + dir.status().ToString());
        return kExitFailed;
      }
      std::vector<std::string> args = {"--steps", std::to_string(steps_), "--log-every", "1000000",
                                       "--no-protect"};
      const std::vector<std::string> device = DeviceArgs();
      args.insert(args.end(), device.begin(), device.end());
      args.insert(args.end(), extra.begin(), extra.end());
      auto t = RunTrainTimed(*dir, ranks_, hidden_, batch, args, milliseconds(1800000));
      if (!t.ok()) {
        Progress("offload-e2e: the " + variant + " run: " + t.status().ToString());
        return kExitFailed;
      }
      (void)RemoveTree(*dir);
      steps[variant].push_back(t->step_s);
    }
  }
  const double gpu = Median(steps["gpu"]), interleaved = Median(steps["interleaved"]);
  const double cpu = Median(steps["cpu"]);
  const char* budget = std::getenv("RTFT_OFFLOAD_GPU_BUDGET");
  JsonLines out;
  out.Emit({{"name", "offload_e2e"},
            {"ranks", ranks_},
            {"device", "cuda/" + comm_},
            {"ranks_share_gpu", ranks_ > 1},
            {"hidden", hidden_},
            {"batch", batch},
            {"steps", steps_},
            {"repeats", repeats_},
            {"gpu_budget", budget ? budget : "default (RTFT_OFFLOAD_GPU_BUDGET unset)"},
            {"step_s_gpu", gpu},
            {"step_s_interleaved", interleaved},
            {"step_s_cpu", cpu},
            {"step_s_gpu_runs", steps["gpu"]},
            {"step_s_interleaved_runs", steps["interleaved"]},
            {"step_s_cpu_runs", steps["cpu"]},
            // Deep Optimizer States' comparison: the interleaved update against the CPU-only one
            // (speedup > 1: faster), and what offloading costs against the resident optimizer.
            {"interleaved_speedup_over_cpu", cpu / interleaved},
            {"interleaved_over_gpu", interleaved / gpu},
            {"cpu_over_gpu", cpu / gpu}});
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewOffloadE2eCommand() {
  return std::make_unique<OffloadE2eCommand>();
}

}  // namespace rtft::bench
