// `rtft-bench offload`: the optimizer-offload claims of docs/benchmarks.md on one model and one
// GPU memory budget: CPU-only update (gradients down, parameters up), GPU-resident (the ceiling),
// static splits swept over fractions, and interleaved (the model's share refined by the measured
// search, measured once it settled); plus the host memory bandwidth (STREAM triad) and the bare
// CPU AdamW kernels that bound the CPU side.
// Without a GPU the CPU variants run on host memory and the GPU ones are reported as skipped.
#include "bench/offload/offload_bench.h"
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/bench_plot.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"
#include "bench/offload/offload_runs.h"
#include "core/params.h"

namespace rtft::bench {
namespace {

// PyTorch's foreach AdamW on the GPU machine: 1.0 B params/s on 16 threads (docs/benchmarks.md).
constexpr double kPytorchPerThread = 1.0e9 / 16;

using nlohmann::json;

class OffloadCommand : public BenchCommand {
 public:
  const char* name() const override { return "offload"; }
  const char* help() const override {
    return "optimizer offload: CPU-only vs GPU-resident vs static split (swept) vs interleaved";
  }
  void AddFlags(CLI::App* cmd) override;
  int Run() override;

 private:
  Status Measure(JsonLines* out);
  Status MeasureCpuBounds(DType dtype, JsonLines* out, json* summary);
  json Line(const std::string& name) const;

  std::string params_ = "auto";
  std::string dtype_ = "bfloat16";
  uint64_t subgroup_ = 0;
  int threads_ = 0;
  std::string budget_;
  int steps_ = 5;
  int warmup_ = 4;
  int max_settle_ = 64;
  std::string fractions_ = "0.25,0.5,0.6,0.7,0.8,0.9,1";
  std::string plot_;
  bool skip_bounds_ = false;

  uint64_t elements_ = 0;
  uint64_t budget_bytes_ = 0;
};

void OffloadCommand::AddFlags(CLI::App* cmd) {
  cmd->add_option("--params", params_,
                  "model size in parameters (K/M/G, binary); auto: 1G with a GPU, 32M without")
      ->capture_default_str();
  cmd->add_option("--dtype", dtype_, "parameter and gradient dtype")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  cmd->add_option("--subgroup", subgroup_,
                  "subgroup size in parameters (default: RTFT_OFFLOAD_SUBGROUP_ELEMENTS)");
  cmd->add_option("--threads", threads_, "CPU update threads (default: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--budget", budget_,
                  "GPU memory for optimizer buffers, the same in every variant (default: "
                  "RTFT_OFFLOAD_GPU_BUDGET)");
  cmd->add_option("--steps", steps_, "measured steps per variant (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", warmup_,
                  "unmeasured steps first; interleaved also runs until its share search settled")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-settle-steps", max_settle_,
                  "interleaved: most unmeasured steps to wait for the share search to settle")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fractions", fractions_, "static split: GPU fractions to sweep")
      ->capture_default_str();
  cmd->add_flag("--skip-bounds", skip_bounds_, "skip the triad and bare-kernel measurements");
  cmd->add_option("--plot", plot_, "also write the JSON lines next to FILE.png and draw a chart");
}

json OffloadCommand::Line(const std::string& name) const {
  json j;
  j["bench"] = "offload";
  j["name"] = name;
  j["params"] = elements_;
  j["dtype"] = dtype_;
  j["threads"] = threads_;
  j["budget_bytes"] = budget_bytes_;
  return j;
}

Status OffloadCommand::MeasureCpuBounds(DType dtype, JsonLines* out, json* summary) {
  // Bytes one CPU AdamW element moves: fp32 gradient, master, m and v read; master, m and v
  // written; the rounded parameter written. The bound divides the triad's bandwidth (with
  // write-allocate) by it.
  const double bytes_per_param = 4 + 12 + 12 + static_cast<double>(DTypeSize(dtype));
  const uint64_t n = std::min<uint64_t>(elements_, 256ull << 20);
  Progress("host memory bandwidth (triad, " + std::to_string(threads_) + " threads)");
  RTFT_ASSIGN_OR_RETURN(TriadResult triad, RunTriad(n, threads_, 5));
  const double bound = triad.gbps_moved * 1e9 / bytes_per_param;
  json t = Line("triad");
  t["gbps"] = triad.gbps;
  t["gbps_with_write_allocate"] = triad.gbps_moved;
  t["bytes"] = triad.bytes;
  t["adamw_bytes_per_param"] = bytes_per_param;
  t["adamw_bound_params_per_s"] = bound;
  out->Emit(t);
  double best = 0;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    StatusOr<KernelResult> k = RunCpuKernel(isa, n, dtype, threads_, 5);
    json j = Line(std::string("cpu_kernel_") + isa);
    if (!k.ok()) {
      j["skipped"] = k.status().message();
      out->Emit(j);
      continue;
    }
    j["isa"] = k->isa;
    j["params_per_s"] = k->params_per_s;
    j["per_thread_params_per_s"] = k->params_per_s / threads_;
    j["vs_pytorch_per_thread"] = k->params_per_s / threads_ / kPytorchPerThread;
    j["vs_bandwidth_bound"] = k->params_per_s / bound;
    out->Emit(j);
    Progress(std::string("  ") + isa + ": " + std::to_string(k->params_per_s / 1e9) +
             " B params/s");
    best = std::max(best, k->params_per_s);
  }
  (*summary)["cpu_kernel_params_per_s"] = best;
  (*summary)["cpu_kernel_vs_pytorch_per_thread"] = best / threads_ / kPytorchPerThread;
  (*summary)["cpu_kernel_vs_bandwidth_bound"] = best / bound;
  // docs/benchmarks.md: 90 % of the memory-bandwidth bound or more.
  (*summary)["target_cpu_kernel_met"] = best / bound >= 0.9;
  return Status::Ok();
}

StatusOr<std::vector<double>> ParseFractions(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      const double f = std::stod(item);
      if (f < 0 || f > 1) throw std::out_of_range(item);
      out.push_back(f);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--fractions: '" + item + "' is not in [0, 1]");
    }
  }
  return out;
}

Status OffloadCommand::Measure(JsonLines* out) {
  DType dtype;
  ParseDType(dtype_, &dtype);
  const Status gpu_usable = CheckGpuUsable();
  const bool gpu = gpu_usable.ok();
  if (params_ == "auto") {
    elements_ = gpu ? (1ull << 30) : (32ull << 20);
  } else {
    RTFT_ASSIGN_OR_RETURN(elements_, ParseBytes(params_));
  }
  if (elements_ == 0) return Status::InvalidArgument("--params must be positive");
  if (threads_ <= 0) threads_ = std::max(1u, std::thread::hardware_concurrency());
  if (budget_.empty()) {
    RTFT_ASSIGN_OR_RETURN(budget_bytes_, ParamBytes(Param::kOffloadGpuBudget));
  } else {
    RTFT_ASSIGN_OR_RETURN(budget_bytes_, ParseBytes(budget_));
  }
  RTFT_ASSIGN_OR_RETURN(std::vector<double> fractions, ParseFractions(fractions_));
  json summary = Line("summary");
  if (!skip_bounds_) RTFT_RETURN_IF_ERROR(MeasureCpuBounds(dtype, out, &summary));

  Progress("model: " + std::to_string(elements_) + " " + dtype_ + " parameters in " +
           (gpu ? "GPU" : "host") + " memory");
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<BenchModel> model,
                        BenchModel::Create(elements_, dtype, gpu));
  OffloadOptions base;
  base.subgroup_elements = subgroup_;
  base.cpu_threads = threads_;
  base.gpu_budget_bytes = budget_bytes_;
  StepResult inter_r;
  auto run = [&](const std::string& name, OffloadOptions o, double fraction) -> StatusOr<double> {
    Progress("variant " + name + (fraction >= 0 ? " " + std::to_string(fraction) : ""));
    RTFT_ASSIGN_OR_RETURN(StepResult r, RunOptimizer(*model, o, warmup_, steps_, max_settle_));
    json j = Line(name);
    j["mode"] = OffloadModeName(o.mode);
    if (fraction >= 0) j["gpu_fraction"] = fraction;
    j["update_s"] = r.update_s;
    j["params_per_s"] = static_cast<double>(elements_) / r.update_s;
    j["gpu_subgroups"] = r.gpu_subgroups;
    j["subgroups"] = r.subgroups;
    j["cpu_kernel"] = r.cpu_kernel;
    j["state_on"] = gpu ? "device params, host optimizer state" : "host";
    if (r.predicted_s > 0) j["predicted_s"] = r.predicted_s;
    if (o.mode == OffloadMode::kInterleaved && fraction < 0) {
      inter_r = r;
      j["gpu_fraction"] = static_cast<double>(r.gpu_subgroups) / static_cast<double>(r.subgroups);
      j["settle_steps"] = r.settle_steps;
      j["settled"] = r.settled;
      j["model_gpu_subgroups"] = r.model_gpu_subgroups;
      j["searched_while_measuring"] = r.searched_while_measuring;
      Progress("  share settled after " + std::to_string(r.settle_steps) +
               " steps: " + std::to_string(r.gpu_subgroups) + "/" + std::to_string(r.subgroups) +
               " subgroups on the GPU (the model chose " + std::to_string(r.model_gpu_subgroups) +
               ")" + (r.settled ? "" : "; NOT settled"));
    }
    if (o.mode == OffloadMode::kGpu) {
      j["gpu_state_bytes"] = elements_ * 12;
      j["within_budget"] = elements_ * 12 <= budget_bytes_;
    }
    out->Emit(j);
    Progress("  " + std::to_string(r.update_s * 1e3) + " ms per step, " +
             std::to_string(elements_ / r.update_s / 1e9) + " B params/s");
    return r.update_s;
  };

  OffloadOptions cpu = base;
  cpu.mode = OffloadMode::kCpu;
  RTFT_ASSIGN_OR_RETURN(const double cpu_s, run("cpu_only", cpu, -1));
  summary["cpu_only_s"] = cpu_s;
  if (!gpu) {
    for (const char* name : {"gpu_resident", "static_split", "interleaved"}) {
      json j = Line(name);
      j["skipped"] = gpu_usable.message();
      out->Emit(j);
    }
    Progress("GPU variants skipped: " + gpu_usable.message());
    summary["gpu_skipped"] = gpu_usable.message();
    out->Emit(summary);
    return Status::Ok();
  }
  OffloadOptions resident = base;
  resident.mode = OffloadMode::kGpu;
  StatusOr<double> resident_s = run("gpu_resident", resident, -1);
  if (resident_s.ok()) {
    summary["gpu_resident_s"] = *resident_s;
  } else {
    json j = Line("gpu_resident");
    j["skipped"] = resident_s.status().ToString();
    out->Emit(j);
  }
  double best_static = 0, best_fraction = 0;
  for (double f : fractions) {
    OffloadOptions s = base;
    s.mode = OffloadMode::kInterleaved;
    s.static_gpu_fraction = f;
    RTFT_ASSIGN_OR_RETURN(const double t, run("static_split", s, f));
    if (best_static == 0 || t < best_static) best_static = t, best_fraction = f;
  }
  OffloadOptions inter = base;
  inter.mode = OffloadMode::kInterleaved;
  RTFT_ASSIGN_OR_RETURN(const double inter_s, run("interleaved", inter, -1));
  summary["interleaved_s"] = inter_s;
  summary["interleaved_gpu_subgroups"] = inter_r.gpu_subgroups;
  summary["interleaved_gpu_fraction"] =
      static_cast<double>(inter_r.gpu_subgroups) / static_cast<double>(inter_r.subgroups);
  summary["interleaved_model_gpu_subgroups"] = inter_r.model_gpu_subgroups;
  summary["interleaved_settle_steps"] = inter_r.settle_steps;
  summary["interleaved_settled"] = inter_r.settled;
  summary["best_static_s"] = best_static;
  summary["best_static_fraction"] = best_fraction;
  summary["interleaved_vs_cpu_only"] = cpu_s / inter_s;
  summary["interleaved_vs_best_static"] = best_static / inter_s;
  // docs/benchmarks.md: no slower than the best static split of the sweep.
  summary["target_vs_best_static_met"] = best_static / inter_s >= 1.0;
  out->Emit(summary);
  return Status::Ok();
}

int OffloadCommand::Run() {
  JsonLines out;
  Status st = Measure(&out);
  if (!st.ok()) {
    std::cerr << "rtft-bench offload: " << st << "\n";
    return st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  if (!plot_.empty()) WritePlot(plot_, out.lines());
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewOffloadCommand() { return std::make_unique<OffloadCommand>(); }

}  // namespace rtft::bench
