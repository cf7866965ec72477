#include "bench/goodput/goodput_inputs.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/common/bench_json_lines.h"
#include "core/check.h"

namespace rtft::bench::goodput {
namespace {

constexpr double kDay = 86400;

// Llama 3: 419 unexpected interruptions in 54 days on 2,048 nodes of 8 H100 GPUs.
constexpr double kLlama3RatePerNodeH = 419.0 / (2048.0 * 54.0 * 24.0);

const char* const kRecoveryRow =
    "docs/benchmarks.md, Measured: on the GPU, recovery: "
    "3 ranks + a spare sharing one H200 over Gloo, the "
    "calibration's batch, 2026-12-02";

// The job and its failures.
std::vector<Input> JobInputs() {
  return {
      {"failures_per_node_h", kLlama3RatePerNodeH, "1/(node h)", 1e-7, 0.01, false,
       "Llama 3 (Dubey et al. 2024, sec. 3.3.4): 419 unexpected interruptions in 54 days on "
       "16,384 H100 GPUs (2,048 nodes of 8)",
       "failures per node and hour"},
      {"transient_fraction", 0.22, "", 0, 1, false,
       "Llama 3: 78 % of the 419 were confirmed or suspected hardware (a node loss here); the "
       "other 22 % are taken as process crashes restarted in place",
       "share of failures that are process crashes (the rest lose a node)"},
      {"job_days", 54, "days", 0.01, 3650, false, "Llama 3's 54-day pre-training snapshot",
       "failure-free training time of the job"},
      {"step_s", 6, "s", 1e-3, 3600, false,
       "derived from Llama 3 405B: 6 x 405e9 parameters x 16M tokens per step / (16,384 x 989 "
       "TFLOP/s x 41 % MFU) = about 6 s",
       "one training step"},
      {"state_gb_per_gpu", 4, "GB", 1e-3, 1024, false,
       "Llama 3: a checkpoint holds 1 MB to 4 GB of model state per GPU (the upper end)",
       "checkpointed state per GPU"},
      {"storage_gbps", 2000, "GB/s", 1e-3, 1e7, false,
       "Llama 3: Tectonic, 2 TB/s sustained (7 TB/s peak); a GPU's share caps its L3 bandwidth",
       "file system bandwidth of the whole job"},
  };
}

// rt-ft's measured figures and what they do not cover.
std::vector<Input> RtftInputs() {
  return {
      {"protect_overhead_pct", 2.5, "%", 0, 100, false,
       "docs/benchmarks.md, Measured: protection overhead: "
       "median of 9 runs, 2-core CPU machine, host "
       "state, 2026-11-30 (not measured on GPUs)",
       "step time added by L1 + L2 protection"},
      {"rtft_detect_crash_s", 0.066, "s", 0, 3600, false,
       std::string(kRecoveryRow) + ": process crash seen",
       "rt-ft: a crashed process seen by its agent"},
      {"rtft_recover_crash_s", 1.10 - 0.066 - 0.28, "s", 0, 3600, false,
       std::string(kRecoveryRow) +
           ": resumed 1.10 s - seen 0.066 s - the step redone 0.28 s (the restarted process's "
           "CUDA start-up included)",
       "rt-ft: detection to the step started again, process crash"},
      {"rtft_detect_node_s", 1.01, "s", 0, 3600, false,
       std::string(kRecoveryRow) +
           ": slot lost, heartbeat timeout 1 s (rtft-bench detect --sim: 0.91-1.0 s up to 4096 "
           "agents)",
       "rt-ft: a lost node seen by the heartbeat timeout"},
      {"rtft_recover_node_s", 1.87 - 1.01 - 0.28, "s", 0, 3600, false,
       std::string(kRecoveryRow) +
           ": resumed 1.87 s - seen 1.01 s - the step redone 0.28 s (the spare's CUDA start-up "
           "after its activation included)",
       "rt-ft: detection to the step started again on a spare, before the state transfer"},
      {"rtft_protocol_s", 0.925, "s", 0, 3600, false,
       "docs/benchmarks.md, Measured: control plane: "
       "rtft-bench recovery --sim, 4096 simulated agents "
       "through the real coordinator, protocol_s with the L2 rings' rendezvous (median of 3, "
       "2-core CPU machine, 2026-12-02)",
       "rt-ft: the recovery protocol at the job's scale (event to every rank holding the plan "
       "and its communicators' keys), added to every recovery"},
      {"rtft_scale_s", 10, "s", 0, 3600, false,
       "assumed, not measured: what neither 4 ranks on one host nor the simulated protocol shows "
       "(NCCL communicators initialised at thousands of GPUs, the spare's state over the "
       "network's switches)",
       "rt-ft: added to every recovery at scale"},
      {"net_gbps_per_gpu", 50, "GB/s", 1e-3, 1e4, false,
       "Llama 3: 400 Gb/s per GPU (RoCE and InfiniBand)",
       "network bandwidth that moves a lost rank's state to its spare"},
      {"l3_write_gbps_per_gpu", 2.37, "GB/s", 1e-3, 1e4, false,
       "docs/benchmarks.md, Measured: checkpoint engine: "
       "rt-ft persist, 16 GiB of GPU state in 64 tensors, "
       "1x H200, local disk, 2026-12-02 (1.85 GB/s for 18 GiB on 2026-11-29)",
       "L3 write bandwidth per GPU"},
      {"l3_load_gbps_per_gpu", 2.11, "GB/s", 1e-3, 1e4, false,
       "docs/benchmarks.md, Measured: checkpoint engine: "
       "restore into GPU memory, the same 16 GiB run "
       "(0.974 of the raw read)",
       "L3 load bandwidth per GPU"},
      {"ckpt_blocking_s_per_gb", 0.33 / (16.0 * 1.073741824), "s/GB", 0, 100, false,
       "docs/benchmarks.md, Measured: checkpoint engine: "
       "rt-ft held training 0.33 s for 16 GiB of GPU state, "
       "the same run",
       "training held per checkpoint, per GB of state"},
      {"rtft_l3_interval_h", 1, "h", 0.01, 8760, false,
       "assumed: rt-ft needs L3 only when both holders of a replica are lost",
       "training time between rt-ft's L3 versions"},
      {"spares", -1, "nodes", -1, 1 << 20, true,
       "auto: the fewest with all in repair at most 1 % of the time",
       "spare nodes of the job (-1: auto)"},
      {"repair_h", 48, "h", 0.01, 1e5, false,
       "assumed, not measured: a lost node drained, diagnosed, repaired",
       "mean time until a lost node is a spare again"},
  };
}

// Checkpoint-restart's costs at scale.
std::vector<Input> RestartInputs() {
  return {
      {"restart_detect_node_s", 600, "s", 0, kDay, false,
       "PyTorch's ProcessGroupNCCL timeout, 10 min by default since PyTorch 2.2 "
       "(pytorch/pytorch#110947): the survivors of a lost node wait in a collective",
       "checkpoint-restart: a lost node seen"},
      {"restart_detect_crash_s", 10, "s", 0, kDay, false,
       "assumed: the launcher (torchrun, srun --kill-on-bad-exit) ends the job when a process "
       "exits",
       "checkpoint-restart: a crashed process seen"},
      {"relaunch_s", 300, "s", 0, kDay, false,
       "assumed, not measured at scale: the job requeued, nodes allocated, processes started "
       "(rtft-bench recovery's relaunch of 4 ranks on one host: under 1 s)",
       "checkpoint-restart: job relaunch"},
      {"startup_s", 120, "s", 0, kDay, false,
       "assumed, not measured at scale: CUDA contexts, NCCL communicators and data loaders on "
       "thousands of GPUs",
       "checkpoint-restart: CUDA/NCCL start-up"},
  };
}

// A measured figure file is a few lines; anything much larger is not one.
constexpr size_t kMaxJsonBytes = 1 << 20;

std::string Num(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

using Line = JsonLine;

bool StringIs(const nlohmann::json& j, const char* key, const char* value) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() && it->get<std::string>() == value;
}

// The last line whose `key` is `value` and, when given, whose `key2` is `value2`.
const Line* LastWhere(const std::vector<Line>& lines, const char* key, const char* value,
                      const char* key2 = nullptr, const char* value2 = nullptr) {
  const Line* found = nullptr;
  for (const Line& l : lines)
    if (StringIs(l.json, key, value) && (key2 == nullptr || StringIs(l.json, key2, value2)))
      found = &l;
  return found;
}

std::string Where(const std::string& path, const Line& l) {
  return path + " line " + std::to_string(l.number);
}

// A finite number in [lo, hi]; InvalidArgument naming the file, line and key otherwise.
StatusOr<double> NumberAt(const std::string& path, const Line& l, const char* key, double lo,
                          double hi) {
  const auto it = l.json.find(key);
  if (it == l.json.end() || !it->is_number())
    return Status::InvalidArgument(Where(path, l) + ": '" + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    return Status::InvalidArgument(Where(path, l) + ": '" + key + "' must be in [" + Num(lo) +
                                   ", " + Num(hi) + "], got " + Num(v));
  return v;
}

void AddDerived(const SimParams& p, nlohmann::json* derived) {
  (*derived)["ckpt_blocking_s"] = p.ckpt_blocking_s;
  (*derived)["ckpt_write_s"] = p.ckpt_write_s;
  (*derived)["ckpt_load_s"] = p.ckpt_load_s;
  (*derived)["rtft_recover_crash_s"] = p.rtft_recover_crash_s;
  (*derived)["rtft_recover_node_s"] = p.rtft_recover_node_s;
  (*derived)["replica_rebuild_s"] = p.replica_rebuild_s;
  (*derived)["spares"] = p.spares;
  (*derived)["spare_gpu_fraction"] = static_cast<double>(p.spares) / p.nodes;
}

}  // namespace

GoodputInputs GoodputInputs::Defaults() {
  GoodputInputs in;
  for (auto* group : {&JobInputs, &RtftInputs, &RestartInputs}) {
    for (Input& i : (*group)()) in.inputs_.push_back(std::move(i));
  }
  return in;
}

Input* GoodputInputs::Find(const std::string& name) {
  for (Input& i : inputs_)
    if (i.name == name) return &i;
  return nullptr;
}

double GoodputInputs::Get(const std::string& name) const {
  for (const Input& i : inputs_)
    if (i.name == name) return i.value;
  RTFT_CHECK_MSG(false, ("unknown goodput input " + name).c_str());
  return 0;
}

Status GoodputInputs::Set(const std::string& name, double value, const std::string& source) {
  Input* in = Find(name);
  if (in == nullptr) return Status::InvalidArgument("unknown input '" + name + "'");
  if (!(value >= in->min && value <= in->max))  // NaN fails both
    return Status::InvalidArgument(source + ": " + name + " must be in [" + Num(in->min) + ", " +
                                   Num(in->max) + "] " + in->unit + ", got " + Num(value));
  if (in->integer && value != std::floor(value))
    return Status::InvalidArgument(source + ": " + name + " must be an integer, got " + Num(value));
  in->value = value;
  in->source = source;
  return Status::Ok();
}

nlohmann::json GoodputInputs::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Input& i : inputs_)
    j[i.name] = {{"value", i.value}, {"unit", i.unit}, {"source", i.source}};
  return j;
}

Status GoodputInputs::ReadProtectJson(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::vector<Line> lines, ReadJsonLines(path, kMaxJsonBytes));
  const Line* l = LastWhere(lines, "name", "protect");
  if (l == nullptr) return Status::InvalidArgument(path + ": no line with \"name\": \"protect\"");
  RTFT_ASSIGN_OR_RETURN(double pct, NumberAt(path, *l, "overhead_pct", -100, 100));
  std::string source = Where(path, *l) + " (rtft-bench protect: overhead_pct)";
  if (pct < 0) {  // the median of noisy runs; protection never speeds a step up
    source += ", measured " + Num(pct) + " %, taken as 0";
    pct = 0;
  }
  return Set("protect_overhead_pct", pct, source);
}

Status GoodputInputs::ReadRecoveryJson(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::vector<Line> lines, ReadJsonLines(path, kMaxJsonBytes));
  for (const char* kind : {"process", "slot"}) {
    const Line* l = LastWhere(lines, "name", "recovery", "failure", kind);
    if (l == nullptr)
      return Status::InvalidArgument(path +
                                     ": no line with \"name\": \"recovery\" and "
                                     "\"failure\": \"" +
                                     kind + "\"");
    RTFT_ASSIGN_OR_RETURN(double detect, NumberAt(path, *l, "detect_s", 0, 3600));
    RTFT_ASSIGN_OR_RETURN(double resumed, NumberAt(path, *l, "resumed_s", detect, 3600));
    RTFT_ASSIGN_OR_RETURN(double step, NumberAt(path, *l, "step_s", 0, 3600));
    // "resumed" runs from the failure until the interrupted step is done again.
    const double recover = std::max(0.0, resumed - detect - step);
    const std::string src = Where(path, *l) + " (rtft-bench recovery, " + kind + ": ";
    const std::string which = std::string(kind) == "process" ? "crash" : "node";
    RTFT_RETURN_IF_ERROR(Set("rtft_detect_" + which + "_s", detect, src + "detect_s)"));
    RTFT_RETURN_IF_ERROR(
        Set("rtft_recover_" + which + "_s", recover, src + "resumed_s - detect_s - step_s)"));
  }
  return Status::Ok();
}

Status GoodputInputs::ReadRecoverySimJson(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::vector<Line> lines, ReadJsonLines(path, kMaxJsonBytes));
  // The one-failure case at the largest agent count (the last of equal ones).
  const Line* best = nullptr;
  double best_agents = 0;
  for (const Line& l : lines) {
    if (!StringIs(l.json, "name", "recovery_sim") || !StringIs(l.json, "second_failure", "none"))
      continue;
    RTFT_ASSIGN_OR_RETURN(double agents, NumberAt(path, l, "agents", 1, 1 << 24));
    if (agents >= best_agents) {
      best = &l;
      best_agents = agents;
    }
  }
  if (best == nullptr)
    return Status::InvalidArgument(path +
                                   ": no line with \"name\": \"recovery_sim\" and "
                                   "\"second_failure\": \"none\"");
  RTFT_ASSIGN_OR_RETURN(double protocol, NumberAt(path, *best, "protocol_s", 0, 3600));
  return Set("rtft_protocol_s", protocol,
             Where(path, *best) + " (rtft-bench recovery --sim, " + Num(best_agents) +
                 " agents, one failure: protocol_s)");
}

Status GoodputInputs::ReadCkptJson(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::vector<Line> lines, ReadJsonLines(path, kMaxJsonBytes));
  const Line* l = LastWhere(lines, "name", "ckpt", "variant", "rtft");
  if (l == nullptr)
    return Status::InvalidArgument(path +
                                   ": no line with \"name\": \"ckpt\" and "
                                   "\"variant\": \"rtft\"");
  const std::string src = Where(path, *l) + " (rtft-bench ckpt, rtft: ";
  RTFT_ASSIGN_OR_RETURN(double persist, NumberAt(path, *l, "persist_gbps", 1e-3, 1e4));
  const char* load_key =
      l->json.contains("restore_device_gbps") && l->json["restore_device_gbps"].is_number()
          ? "restore_device_gbps"
          : "restore_gbps";
  RTFT_ASSIGN_OR_RETURN(double load, NumberAt(path, *l, load_key, 1e-3, 1e4));
  RTFT_ASSIGN_OR_RETURN(double bytes, NumberAt(path, *l, "bytes", 1, 1e15));
  RTFT_ASSIGN_OR_RETURN(double blocking, NumberAt(path, *l, "blocking_s", 0, 1e5));
  RTFT_RETURN_IF_ERROR(Set("l3_write_gbps_per_gpu", persist, src + "persist_gbps)"));
  RTFT_RETURN_IF_ERROR(Set("l3_load_gbps_per_gpu", load, src + load_key + ")"));
  return Set("ckpt_blocking_s_per_gb", blocking / (bytes / 1e9), src + "blocking_s / bytes)");
}

int AutoSpares(int nodes, double node_losses_per_node_h, double repair_h, double target) {
  const double mean = nodes * node_losses_per_node_h * repair_h;
  if (mean > 500) {  // exp(-mean) would underflow: the normal approximation, z by bisection
    double lo = 0, hi = 40;
    for (int i = 0; i < 100; ++i) {
      const double z = (lo + hi) / 2;
      (0.5 * std::erfc(z / std::sqrt(2.0)) > target ? lo : hi) = z;
    }
    return static_cast<int>(std::min(double(1 << 20), std::ceil(mean + hi * std::sqrt(mean))));
  }
  // P(N >= s) for N ~ Poisson(mean), from the probability of 0 upwards.
  double term = std::exp(-mean), below = 0;
  for (int s = 0; s < (1 << 20); ++s) {
    if (1.0 - below <= target) return std::max(1, s);
    below += term;
    term *= mean / (s + 1);
  }
  return 1 << 20;
}

StatusOr<SimParams> ToSimParams(const GoodputInputs& in, int gpus, int gpus_per_node,
                                nlohmann::json* derived) {
  if (gpus_per_node < 1 || gpus_per_node > 64 || gpus < 2 * gpus_per_node ||
      gpus % gpus_per_node != 0 || gpus > (1 << 24))
    return Status::InvalidArgument("--gpus " + std::to_string(gpus) +
                                   ": two nodes or more, a multiple of --gpus-per-node (" +
                                   std::to_string(gpus_per_node) + "), at most 16M");
  auto v = [&](const char* name) { return in.Get(name); };
  SimParams p;
  p.nodes = gpus / gpus_per_node;
  p.work_s = v("job_days") * kDay;
  p.failures_per_node_h = v("failures_per_node_h");
  p.transient_fraction = v("transient_fraction");
  p.step_s = v("step_s");
  const double state = v("state_gb_per_gpu"), share = v("storage_gbps") / gpus;
  const double write_gbps = std::min(v("l3_write_gbps_per_gpu"), share);
  const double load_gbps = std::min(v("l3_load_gbps_per_gpu"), share);
  p.ckpt_blocking_s = v("ckpt_blocking_s_per_gb") * state;
  p.ckpt_write_s = state / write_gbps;
  p.ckpt_load_s = state / load_gbps;
  p.protect_overhead = v("protect_overhead_pct") / 100;
  p.rtft_detect_crash_s = v("rtft_detect_crash_s");
  p.rtft_detect_node_s = v("rtft_detect_node_s");
  const double transfer_s = state / v("net_gbps_per_gpu");
  const double at_scale_s = v("rtft_protocol_s") + v("rtft_scale_s");
  p.rtft_recover_crash_s = v("rtft_recover_crash_s") + at_scale_s;
  p.rtft_recover_node_s = v("rtft_recover_node_s") + at_scale_s + transfer_s;
  p.rtft_l3_interval_s = v("rtft_l3_interval_h") * 3600;
  p.repair_h = v("repair_h");
  const bool auto_spares = v("spares") < 0;
  const double node_losses_per_node_h = p.failures_per_node_h * (1 - p.transient_fraction);
  p.spares = auto_spares
                 ? AutoSpares(p.nodes, node_losses_per_node_h, p.repair_h, kAutoSparesTarget)
                 : static_cast<int>(v("spares"));
  // The spare's first protected step captures its state, the next one's L2 send completes.
  p.replica_rebuild_s = 2 * p.step_s * (1 + p.protect_overhead);
  p.restart_detect_crash_s = v("restart_detect_crash_s");
  p.restart_detect_node_s = v("restart_detect_node_s");
  p.relaunch_s = v("relaunch_s");
  p.startup_s = v("startup_s");
  p.restart_interval_s = std::max(p.step_s, p.ckpt_write_s);  // the interval search sets it
  RTFT_RETURN_IF_ERROR(Validate(p));
  *derived = {{"nodes", p.nodes},
              {"l3_write_gbps_per_gpu", write_gbps},
              {"l3_load_gbps_per_gpu", load_gbps},
              {"transfer_s", transfer_s},
              {"spares_auto", auto_spares}};
  AddDerived(p, derived);
  return p;
}

}  // namespace rtft::bench::goodput
