#include "bench/protect/protect_bench.h"
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <thread>

#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"
#include "bench/offload/offload_runs.h"
#include "bench/protect/protect_budget.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// What protection costs, measured within one run: the trainer alternates blocks of protected
// steps (L1 + L2) and unprotected ones (ProtectOptions::protect_step), so that the machine's drift
// between runs, several percent on two shared cores, slows both kinds of step alike
// (docs/protect.md, "Benchmarks").
class ProtectCommand final : public BenchCommand {
 public:
  const char* name() const override { return "protect"; }
  const char* help() const override {
    return "per-step protection: rtft-train's steps with and without L1 + L2, alternated in "
           "blocks within each run (4 ranks + a spare under mpirun + dp-launch)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--ranks", ranks_, "active ranks")->capture_default_str();
    cmd->add_option("--steps", steps_, "steps per run")->capture_default_str();
    cmd->add_option("--blocks", blocks_, "steps per block (protected and paused alternate)")
        ->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_,
                    "samples per rank and step (0: the batch of a --step-s step here)")
        ->capture_default_str();
    cmd->add_option("--step-s", step_s_, "the step time --batch 0 aims at (0.2 to 0.5 s)")
        ->capture_default_str();
    dev_.AddFlags(cmd);
    cmd->add_option("--repeats", repeats_,
                    "runs (each about 40 s; single runs spread by several points)")
        ->capture_default_str();
    cmd->add_flag("--sdc", sdc_,
                  "also what the replicated copies' cross-check costs: each run paired with one "
                  "under RTFT_PROTECT_SDC_CHECK=0, in alternating order");
    cmd->add_option("--node-ranks", node_ranks_,
                    "the ranks of the node whose budget the protect-node line derives (its host "
                    "traffic and cores against this host's triad and cores)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd->add_flag("--sdc-fence", sdc_fence_,
                  "also what the fence's wait for the cross-check costs: each run paired with one "
                  "under RTFT_PROTECT_SDC_FENCE=1");
    cmd->add_option("--replay", replay_,
                    "also what the replay of every N-th step costs: each run paired with one "
                    "under RTFT_PROTECT_REPLAY_EVERY=N (0: not measured)")
        ->check(CLI::Range(0, 1000000));
    cmd->add_flag("--check-finite", check_finite_,
                  "also what the check for non-finite gradients costs: each run paired with one "
                  "under RTFT_PROTECT_CHECK_FINITE=1");
  }
  int Run() override;

 private:
  struct RunTimes {
    double on_s = 0, off_s = 0;          // rank 0's mean step time, protected and paused
    double cpu_on_s = 0, cpu_off_s = 0;  // CPU time per step, every thread, mean of the ranks
    // Rank 0's waits per protected step (the fence before the update, the last step's replica)
    // and the bytes of its protected state.
    double fence_wait_s = 0, replica_wait_s = 0;
    uint64_t state_bytes = 0;
    // Rank 0's L2: bytes sent and received, and the time of its exchanges.
    uint64_t l2_bytes = 0;
    double l2_s = 0;
    std::optional<RankBudget> budget;  // the host traffic and threads' CPU (protect_budget.h)
  };
  StatusOr<RunTimes> OneRun(int batch, uint64_t* params,
                            const std::map<std::string, std::string>& env = {});
  // The protect-node line (protect_budget.h), when every run's trainers counted the traffic.
  void EmitNodeBudget(const std::vector<RunTimes>& runs, double step_s_on, double cpu_extra_s,
                      uint64_t state_bytes, JsonLines* out) const;
  std::vector<std::string> Extra(std::vector<std::string> a) const {
    const std::vector<std::string> d = dev_.Args();
    a.insert(a.end(), d.begin(), d.end());
    return a;
  }

  int ranks_ = 4, steps_ = 123, blocks_ = 5, hidden_ = 1024, batch_ = 0, repeats_ = 7;
  int replay_ = 0, node_ranks_ = 8;
  bool sdc_ = false, sdc_fence_ = false, check_finite_ = false;
  double step_s_ = 0.3;
  TrainDevice dev_;
};

StatusOr<ProtectCommand::RunTimes> ProtectCommand::OneRun(
    int batch, uint64_t* params, const std::map<std::string, std::string>& env) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  BenchJob job(dir, ranks_ + 1);
  RTFT_RETURN_IF_ERROR(
      job.Start(TrainJobArgs(ranks_, hidden_, batch, {},
                             Extra({"--steps", std::to_string(steps_), "--protect-blocks",
                                    std::to_string(blocks_), "--log-every", "1000000"})),
                env));
  RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(1800000)));
  const std::string out = job.Output();
  static const std::regex done(R"(\[train (\d+)\] done .* step_s=([0-9.]+) cpu_step_s=([0-9.]+) )"
                               R"(paused_step_s=([0-9.]+) paused_cpu_step_s=([0-9.]+) )"
                               R"(fence_wait_s=([0-9.]+) replica_wait_s=([0-9.]+) )"
                               R"(state_bytes=(\d+) l2_bytes=(\d+) l2_s=([0-9.]+))");
  static const std::regex start(R"(\[train 0\] start .* params=(\d+))");
  RunTimes t;
  int ranks = 0;
  bool rank0 = false;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), done); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1] == "0") {
      t.on_s = std::stod((*it)[2]);
      t.off_s = std::stod((*it)[4]);
      t.fence_wait_s = std::stod((*it)[6]);
      t.replica_wait_s = std::stod((*it)[7]);
      t.state_bytes = std::stoull((*it)[8]);
      t.l2_bytes = std::stoull((*it)[9]);
      t.l2_s = std::stod((*it)[10]);
      rank0 = true;
    }
    t.cpu_on_s += std::stod((*it)[3]);
    t.cpu_off_s += std::stod((*it)[5]);
    ++ranks;
  }
  if (!rank0 || ranks != ranks_ || !(t.off_s > 0) || !(t.on_s > 0))
    return Status::Internal("the trainer did not finish (see " + dir + "/mpirun.out)");
  t.cpu_on_s /= ranks;
  t.cpu_off_s /= ranks;
  t.budget = ParseBudget(out, ranks_);
  std::smatch m;
  if (std::regex_search(out, m, start)) *params = std::stoull(m[1]);
  (void)RemoveTree(dir);
  return t;
}

void ProtectCommand::EmitNodeBudget(const std::vector<RunTimes>& runs, double step_s_on,
                                    double cpu_extra_s, uint64_t state_bytes,
                                    JsonLines* out) const {
  std::vector<RankBudget> budgets;
  for (const RunTimes& t : runs)
    if (t.budget) budgets.push_back(*t.budget);
  if (budgets.empty() || budgets.size() != runs.size()) {
    Progress("protect: the trainer did not count the protection's host traffic: no protect-node");
    return;
  }
  // The host's memory bandwidth, all its hardware threads: the triad `rtft-bench offload`
  // measures, over 384 MB (three arrays of 32 Mi floats).
  NodeInputs in;
  in.host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Progress("protect: host memory bandwidth (triad, " + std::to_string(in.host_cores) + " threads)");
  auto triad = RunTriad(32ull << 20, in.host_cores, 5);
  if (!triad.ok()) Progress("protect: the triad failed: " + triad.status().ToString());
  in.triad_gb_per_s = triad.ok() ? triad->gbps_moved : 0;
  in.step_s_on = step_s_on;
  in.cpu_extra_s = cpu_extra_s;
  in.state_bytes = state_bytes;
  in.node_ranks = node_ranks_;
  nlohmann::json line = NodeBudget(budgets, in);
  line["device"] = dev_.Name();
  line["ranks"] = ranks_;
  out->Emit(line);
}

int ProtectCommand::Run() {
  // Each kind of step needs timed steps beyond the warm-up (3 steps) and the first of each block.
  if (ranks_ < 1 || repeats_ < 1 || blocks_ < 2 || steps_ < 3 + 4 * blocks_ || batch_ < 0 ||
      !(step_s_ > 0)) {
    Progress(
        "protect: --ranks >= 1, --repeats >= 1, --blocks >= 2, --steps >= 3 + 4 x --blocks, "
        "--batch >= 0, --step-s > 0");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("protect: " + missing + " is not built");
    return kExitUsage;
  }
  int batch = batch_;
  if (batch == 0) {
    auto b = CalibrateBatch(ranks_, hidden_, step_s_, dev_.Args());
    if (!b.ok()) {
      Progress("protect: " + b.status().ToString());
      return kExitFailed;
    }
    batch = *b;
    Progress("protect: batch " + std::to_string(batch) + " for a step of about " +
             std::to_string(step_s_) + " s");
  }
  std::vector<double> on, off, ratios, cpu_on, cpu_off, cpu_ratios, fence, replica;
  uint64_t state_bytes = 0;
  std::vector<double> l2_rates;  // bytes per second, each run's
  uint64_t params = 0;
  // The twins of each run: the same run under one setting changed, in an order that rotates from
  // run to run so that the machine's drift favours none. Each keeps its runs' times.
  struct Twin {
    std::string what;
    std::map<std::string, std::string> env;
    std::vector<RunTimes> runs;
  };
  std::vector<Twin> twins;
  if (sdc_) twins.push_back({"without the cross-check", {{"RTFT_PROTECT_SDC_CHECK", "0"}}, {}});
  if (sdc_fence_)
    twins.push_back(
        {"with the fence waiting for the cross-check", {{"RTFT_PROTECT_SDC_FENCE", "1"}}, {}});
  if (replay_ > 0)
    twins.push_back({"replaying every " + std::to_string(replay_) + " steps",
                     {{"RTFT_PROTECT_REPLAY_EVERY", std::to_string(replay_)}},
                     {}});
  if (check_finite_)
    twins.push_back(
        {"checking for non-finite gradients", {{"RTFT_PROTECT_CHECK_FINITE", "1"}}, {}});
  std::vector<RunTimes> base;
  for (int r = 0; r < repeats_; ++r) {
    std::string with;
    for (const Twin& w : twins) with += ", and its twin " + w.what;
    Progress("protect: run " + std::to_string(r + 1) + " of " + std::to_string(repeats_) + ", " +
             std::to_string(steps_) + " steps in blocks of " + std::to_string(blocks_) + with);
    const int kinds = 1 + static_cast<int>(twins.size());
    for (int k = 0; k < kinds; ++k) {
      const int which = (k + r) % kinds;  // 0: the run itself, else twins[which - 1]
      auto run = OneRun(batch, &params,
                        which == 0 ? std::map<std::string, std::string>{} : twins[which - 1].env);
      if (!run.ok()) {
        Progress("protect: " + run.status().ToString());
        return kExitFailed;
      }
      (which == 0 ? base : twins[which - 1].runs).push_back(*run);
    }
    const RunTimes& t = base.back();
    on.push_back(t.on_s);
    off.push_back(t.off_s);
    ratios.push_back(t.on_s / t.off_s);
    cpu_on.push_back(t.cpu_on_s);
    cpu_off.push_back(t.cpu_off_s);
    cpu_ratios.push_back(t.cpu_on_s / t.cpu_off_s);
    fence.push_back(t.fence_wait_s);
    replica.push_back(t.replica_wait_s);
    state_bytes = t.state_bytes;
    if (t.l2_s > 0) l2_rates.push_back(t.l2_bytes / t.l2_s);
  }
  // Each run's ratio compares steps of the same minutes of the same machine: their median is the
  // estimate.
  const double overhead = (Median(ratios) - 1.0) * 100.0;
  // The runs' mean and its standard error: how far the estimate may be off.
  std::vector<double> pct;
  double mean = 0, var = 0;
  for (double x : ratios) pct.push_back((x - 1.0) * 100.0);
  for (double x : pct) mean += x / pct.size();
  for (double x : pct) var += (x - mean) * (x - mean) / std::max<size_t>(1, pct.size() - 1);
  const double stderr_pct = pct.size() > 1 ? std::sqrt(var / pct.size()) : 0.0;
  const double step_off = Median(off);
  if (step_off < 0.2 || step_off > 0.5)
    Progress("protect: warning: a step took " + std::to_string(step_off) +
             " s, outside 0.2 to 0.5 s (set --batch)");
  // The target: 3 % of a step on the CPU path, 1 % with device state (docs/protect.md).
  const double target = dev_.cuda() ? 1.0 : 3.0;
  JsonLines out;
  out.Emit(
      {{"name", "protect"},
       {"ranks", ranks_},
       {"device", dev_.Name()},
       // Ranks on one GPU share it: say so next to the figures.
       {"ranks_share_gpu", dev_.cuda() && ranks_ > 1},
       {"params", params},
       {"state_bytes_per_rank", state_bytes},
       {"batch", batch},
       {"steps", steps_},
       {"blocks", blocks_},
       {"repeats", repeats_},
       {"step_s_off", step_off},
       {"step_s_on", Median(on)},
       {"step_s_off_runs", off},
       {"step_s_on_runs", on},
       {"overhead_pct", overhead},
       {"overhead_pct_runs", pct},
       {"overhead_pct_mean", mean},
       {"overhead_pct_stderr", stderr_pct},
       {"cpu_step_s_off", Median(cpu_off)},
       {"cpu_step_s_on", Median(cpu_on)},
       {"cpu_overhead_pct", (Median(cpu_ratios) - 1.0) * 100.0},
       // The protection's CPU seconds per second of protected step: the cores it keeps busy.
       {"protection_cpu_s_per_step_s", (Median(cpu_on) - Median(cpu_off)) / Median(on)},
       {"fence_wait_s", Median(fence)},
       {"fence_wait_pct_of_step", Median(fence) / step_off * 100.0},
       {"replica_wait_s", Median(replica)},
       // L2's speed (a rank's bytes out and in over its exchanges' time), and the replica it
       // could send within one unprotected step at that speed (half the bytes go each way).
       {"l2_gb_per_s", l2_rates.empty() ? 0.0 : Median(l2_rates) / 1e9},
       {"l2_replica_bytes_per_step_max", l2_rates.empty() ? 0.0 : Median(l2_rates) / 2 * step_off},
       {"step_in_range", step_off >= 0.2 && step_off <= 0.5},
       {"target_pct", target},
       {"met", overhead <= target}});
  EmitNodeBudget(base, Median(on), Median(cpu_on) - Median(cpu_off), state_bytes, &out);
  // A run's mean step, protected and paused blocks alike (a replayed step falls in either).
  const auto mean_step = [](const RunTimes& t) { return (t.on_s + t.off_s) / 2; };
  std::vector<double> base_step;
  for (const RunTimes& t : base) base_step.push_back(mean_step(t));
  for (const Twin& w : twins) {
    std::vector<double> twin_over_base, cpu_twin_over_base, twin_step;
    for (size_t r = 0; r < w.runs.size() && r < base.size(); ++r) {
      // The cross-check's and the fence's twins differ from the run in the protected blocks
      // only; the cross-check's runs without it: its cost is the base over the twin.
      const bool sdc = w.env.count("RTFT_PROTECT_SDC_CHECK") > 0;
      const bool fence = w.env.count("RTFT_PROTECT_SDC_FENCE") > 0;
      twin_step.push_back(sdc || fence ? w.runs[r].on_s : mean_step(w.runs[r]));
      twin_over_base.push_back(sdc     ? base[r].on_s / w.runs[r].on_s
                               : fence ? w.runs[r].on_s / base[r].on_s
                                       : mean_step(w.runs[r]) / mean_step(base[r]));
      cpu_twin_over_base.push_back(sdc ? base[r].cpu_on_s / w.runs[r].cpu_on_s
                                       : w.runs[r].cpu_on_s / base[r].cpu_on_s);
    }
    std::vector<double> pct_runs;
    for (double x : twin_over_base) pct_runs.push_back((x - 1.0) * 100.0);
    const double pct = (Median(twin_over_base) - 1.0) * 100.0;
    if (w.env.count("RTFT_PROTECT_SDC_FENCE")) {
      // The fence's wait for the step's exchange (docs/protect.md, "Silent data corruption"): the
      // protected step of the twin over the run's, and the fence's wait in each.
      std::vector<double> fence_wait;
      for (size_t r = 0; r < w.runs.size() && r < base.size(); ++r)
        fence_wait.push_back(w.runs[r].fence_wait_s);
      out.Emit({{"name", "protect-sdc-fence"},
                {"ranks", ranks_},
                {"device", dev_.Name()},
                {"batch", batch},
                {"repeats", repeats_},
                {"step_s_on", Median(on)},
                {"step_s_fenced", Median(twin_step)},
                {"fence_overhead_pct", pct},
                {"fence_overhead_pct_runs", pct_runs},
                {"fence_cpu_overhead_pct", (Median(cpu_twin_over_base) - 1.0) * 100.0},
                {"fence_wait_s", Median(fence)},
                {"fence_wait_s_fenced", Median(fence_wait)}});
    } else if (w.env.count("RTFT_PROTECT_SDC_CHECK")) {
      // The cross-check (docs/protect.md, "Silent data corruption"): one gather of 8 bytes per
      // rank per step in place of the exchange's barrier; the checksums are L1's already.
      out.Emit({{"name", "protect-sdc"},
                {"ranks", ranks_},
                {"device", dev_.Name()},
                {"batch", batch},
                {"repeats", repeats_},
                {"step_s_checked", Median(on)},
                {"step_s_unchecked", Median(twin_step)},
                {"check_overhead_pct", pct},
                {"check_overhead_pct_runs", pct_runs},
                {"check_cpu_overhead_pct", (Median(cpu_twin_over_base) - 1.0) * 100.0},
                {"check_gather_bytes_per_step", 8 * ranks_}});
    } else if (w.env.count("RTFT_PROTECT_REPLAY_EVERY")) {
      // The replay (docs/protect.md, "Replay"): one more local compute per replayed step, and a
      // gather of 24 bytes a rank. What one replayed step adds, spread over N steps, is what
      // every period costs: the figures at 100 and 1000 follow from it.
      const double per_replay_s = (Median(twin_step) - Median(base_step)) * replay_;
      out.Emit({{"name", "protect-replay"},
                {"ranks", ranks_},
                {"device", dev_.Name()},
                {"batch", batch},
                {"repeats", repeats_},
                {"replay_every", replay_},
                {"step_s", Median(base_step)},
                {"step_s_replaying", Median(twin_step)},
                {"replay_overhead_pct", pct},
                {"replay_overhead_pct_runs", pct_runs},
                {"replay_cpu_overhead_pct", (Median(cpu_twin_over_base) - 1.0) * 100.0},
                {"replayed_step_extra_s", per_replay_s},
                {"overhead_pct_at_100", per_replay_s / 100 / Median(base_step) * 100.0},
                {"overhead_pct_at_1000", per_replay_s / 1000 / Median(base_step) * 100.0}});
    } else {
      // The check for non-finite gradients: a pass over the gradients and a gather of one byte a
      // rank per step.
      out.Emit({{"name", "protect-finite"},
                {"ranks", ranks_},
                {"device", dev_.Name()},
                {"batch", batch},
                {"repeats", repeats_},
                {"step_s", Median(base_step)},
                {"step_s_checking", Median(twin_step)},
                {"check_overhead_pct", pct},
                {"check_overhead_pct_runs", pct_runs},
                {"check_cpu_overhead_pct", (Median(cpu_twin_over_base) - 1.0) * 100.0},
                {"check_gather_bytes_per_step", ranks_}});
    }
  }
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewProtectCommand() { return std::make_unique<ProtectCommand>(); }

}  // namespace rtft::bench
