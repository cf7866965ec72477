#include "bench/goodput/goodput_bench.h"
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/common/bench_plot.h"
#include "bench/common/bench_util.h"
#include "bench/goodput/goodput_inputs.h"
#include "bench/goodput/goodput_sweep.h"
#include "sim/goodput_search.h"

namespace rtft::bench {
namespace {

using goodput::GoodputInputs;
using goodput::Input;
using goodput::PointResult;
using goodput::SimParams;
using goodput::Spread;
using nlohmann::json;

// The target of docs/benchmarks.md ("rtft-bench goodput") and the figure DEADPOOL reports.
constexpr double kTargetLostRatio = 0.05;
constexpr double kDeadpoolLostRatio = 0.053;

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string FlagOf(const std::string& name) {
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

json OrNull(double v, int count) { return count > 0 ? json(v) : json(nullptr); }

// Null when nothing was summarized (no job met a failure: no ratio).
void AddSpread(json* j, const std::string& key, const Spread& s) {
  auto value = [&](double v) { return OrNull(v, s.count); };
  (*j)[key] = value(s.mean);
  (*j)[key + "_sd"] = value(s.sd);
  (*j)[key + "_min"] = value(s.min);
  (*j)[key + "_max"] = value(s.max);
}

// Means per job of rt-ft's event counts.
json RtftCounts(const std::vector<goodput::JobResult>& jobs) {
  double crashes = 0, nodes = 0, swaps = 0, exhausted = 0, both = 0;
  for (const auto& j : jobs) {
    crashes += j.crashes;
    nodes += j.node_losses;
    swaps += j.spare_swaps;
    exhausted += j.spares_exhausted;
    both += j.both_holders_lost;
  }
  const double n = std::max<size_t>(1, jobs.size());
  return {{"crashes", crashes / n},
          {"node_losses", nodes / n},
          {"spare_swaps", swaps / n},
          {"spares_exhausted", exhausted / n},
          {"both_holders_lost", both / n}};
}

double LostPerFailure(const std::vector<goodput::JobResult>& jobs) {
  double lost = 0, failures = 0;
  for (const auto& j : jobs) {
    lost += j.lost_s;
    failures += j.failures;
  }
  return failures > 0 ? lost / failures : 0;
}

double MeanFailures(const std::vector<goodput::JobResult>& jobs) {
  double f = 0;
  for (const auto& j : jobs) f += j.failures;
  return jobs.empty() ? 0 : f / jobs.size();
}

class GoodputCommand final : public BenchCommand {
 public:
  const char* name() const override { return "goodput"; }
  const char* help() const override {
    return "goodput of long jobs at 1K-16K GPUs, simulated from a failure model and measured "
           "figures: rt-ft against checkpoint-restart at its best interval (docs/goodput.md)";
  }
  void AddFlags(CLI::App* cmd) override;
  int Run() override;

 private:
  Status LoadInputs();
  json PointLine(int gpus, const SimParams& p, const json& derived, const PointResult& r) const;
  Status RunSizes(const std::vector<uint64_t>& gpus, JsonLines* out);
  Status RunSweep(int gpus, JsonLines* out);
  void PrintInputs() const;

  GoodputInputs inputs_ = GoodputInputs::Defaults();
  std::vector<double> flag_values_;
  std::vector<CLI::Option*> flag_options_;
  std::string protect_json_, recovery_json_, recovery_sim_json_, ckpt_json_, plot_;
  std::string gpus_ = "1024,4096,16384";
  int gpus_per_node_ = 8, jobs_ = 20, search_jobs_ = 8, sweep_gpus_ = 0;
  uint64_t seed_ = 1;
  bool no_sweep_ = false;
};

void GoodputCommand::AddFlags(CLI::App* cmd) {
  cmd->add_option("--gpus", gpus_, "GPU counts to simulate")->capture_default_str();
  cmd->add_option("--gpus-per-node", gpus_per_node_, "GPUs per node (a failure takes a node's)")
      ->capture_default_str();
  cmd->add_option("--seed", seed_, "seed of the first job (jobs use seed, seed + 1, ...)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--jobs", jobs_, "simulated jobs per policy and GPU count (mean and spread)")
      ->capture_default_str();
  cmd->add_option("--search-jobs", search_jobs_,
                  "jobs per candidate of checkpoint-restart's interval search")
      ->capture_default_str();
  cmd->add_flag("--no-sweep", no_sweep_, "skip the sensitivity sweep");
  cmd->add_option("--sweep-gpus", sweep_gpus_, "GPU count of the sweep (0: the largest)")
      ->capture_default_str();
  cmd->add_option("--protect-json", protect_json_, "JSON lines of rtft-bench protect");
  cmd->add_option("--recovery-json", recovery_json_, "JSON lines of rtft-bench recovery");
  cmd->add_option("--recovery-sim-json", recovery_sim_json_,
                  "JSON lines of rtft-bench recovery --sim (the largest agent count's protocol_s)");
  cmd->add_option("--ckpt-json", ckpt_json_, "JSON lines of rtft-bench ckpt");
  cmd->add_option("--plot", plot_, "also write the JSON lines next to FILE.png and draw ETTR");
  // One flag per input; the values land here and count only when given.
  flag_values_.resize(inputs_.all().size());
  for (size_t i = 0; i < inputs_.all().size(); ++i) {
    const Input& in = inputs_.all()[i];
    char value[32];
    std::snprintf(value, sizeof(value), "%.6g", in.value);
    const std::string unit = in.unit.empty() ? "" : " " + in.unit;
    flag_options_.push_back(cmd->add_option(FlagOf(in.name), flag_values_[i],
                                            in.help + " (default " + value + unit + ")"));
  }
}

// Files first, then flags: a flag overrides what a file measured.
Status GoodputCommand::LoadInputs() {
  if (!protect_json_.empty()) RTFT_RETURN_IF_ERROR(inputs_.ReadProtectJson(protect_json_));
  if (!recovery_json_.empty()) RTFT_RETURN_IF_ERROR(inputs_.ReadRecoveryJson(recovery_json_));
  if (!recovery_sim_json_.empty())
    RTFT_RETURN_IF_ERROR(inputs_.ReadRecoverySimJson(recovery_sim_json_));
  if (!ckpt_json_.empty()) RTFT_RETURN_IF_ERROR(inputs_.ReadCkptJson(ckpt_json_));
  for (size_t i = 0; i < flag_options_.size(); ++i) {
    if (flag_options_[i]->count() == 0) continue;
    const std::string& name = inputs_.all()[i].name;
    RTFT_RETURN_IF_ERROR(inputs_.Set(name, flag_values_[i], "command line (" + FlagOf(name) + ")"));
  }
  return Status::Ok();
}

void GoodputCommand::PrintInputs() const {
  Progress("goodput: inputs (value, unit: source)");
  for (const Input& in : inputs_.all()) {
    char value[32];
    std::snprintf(value, sizeof(value), "%.6g", in.value);
    Progress("  " + in.name + " = " + value + " " + in.unit + ": " + in.source);
  }
}

json GoodputCommand::PointLine(int gpus, const SimParams& p, const json& derived,
                               const PointResult& r) const {
  json j = {{"name", "goodput"}, {"gpus", gpus}, {"gpus_per_node", gpus_per_node_}};
  j["mtbf_h"] = goodput::JobMtbfSeconds(p) / 3600;
  AddSpread(&j, "rtft_ettr", r.rtft_ettr);
  // The spares' GPUs train nothing: ETTR over every GPU the job holds.
  j["rtft_ettr_spares_counted"] = r.rtft_ettr.mean * p.nodes / (p.nodes + p.spares);
  AddSpread(&j, "restart_ettr", r.restart_ettr);
  AddSpread(&j, "lost_ratio", r.lost_ratio);
  j["rtft_lost_h"] = r.rtft_lost_s.mean / 3600;
  j["rtft_lost_h_sd"] = r.rtft_lost_s.sd / 3600;
  j["restart_lost_h"] = r.restart_lost_s.mean / 3600;
  j["restart_lost_h_sd"] = r.restart_lost_s.sd / 3600;
  j["rtft_lost_per_failure_s"] = LostPerFailure(r.rtft);
  j["restart_lost_per_failure_s"] = LostPerFailure(r.restart);
  j["rtft_failures"] = MeanFailures(r.rtft);
  j["restart_failures"] = MeanFailures(r.restart);
  j["rtft_events"] = RtftCounts(r.rtft);
  // What each policy costs without failures: protection, and the checkpoints' blocking.
  j["rtft_overhead_h"] = (FailureFreeWallSeconds(p, goodput::Policy::kRtft) - p.work_s) / 3600;
  SimParams q = p;
  q.restart_interval_s = r.search.interval_s;
  j["restart_overhead_h"] =
      (FailureFreeWallSeconds(q, goodput::Policy::kRestart) - p.work_s) / 3600;
  j["restart_interval_s"] = r.search.interval_s;
  j["restart_interval_lower_bound_s"] = r.search.lower_bound_s;
  j["young_interval_s"] = goodput::YoungInterval(p);
  j["daly_interval_s"] = goodput::DalyInterval(p);
  j["interval_candidates"] = r.search.candidates;
  j["finished"] = r.all_finished;
  j["seed"] = seed_;
  j["jobs"] = jobs_;
  j["search_jobs"] = search_jobs_;
  j["target_lost_ratio"] = kTargetLostRatio;
  j["deadpool_lost_ratio"] = kDeadpoolLostRatio;
  j["lost_ratio_jobs"] = r.lost_ratio.count;
  j["met"] = r.lost_ratio.count > 0 ? json(r.all_finished && r.lost_ratio.mean <= kTargetLostRatio)
                                    : json(nullptr);
  j["derived"] = derived;
  j["inputs"] = inputs_.ToJson();
  return j;
}

Status GoodputCommand::RunSizes(const std::vector<uint64_t>& gpus, JsonLines* out) {
  for (uint64_t g : gpus) {
    if (g > (1u << 24)) return Status::InvalidArgument("--gpus: at most 16M");
    json derived;
    RTFT_ASSIGN_OR_RETURN(
        SimParams p, goodput::ToSimParams(inputs_, static_cast<int>(g), gpus_per_node_, &derived));
    RTFT_ASSIGN_OR_RETURN(PointResult r, goodput::RunPoint(p, seed_, jobs_, search_jobs_));
    const json j = PointLine(static_cast<int>(g), p, derived, r);
    Progress("goodput: " + std::to_string(g) + " GPUs (" + std::to_string(p.nodes) +
             " nodes, MTBF " + Fixed(j["mtbf_h"], 2) + " h, " + std::to_string(p.spares) +
             " spares): ETTR rt-ft " + Fixed(r.rtft_ettr.mean, 4) + " +- " +
             Fixed(r.rtft_ettr.sd, 4) + ", checkpoint-restart " + Fixed(r.restart_ettr.mean, 4) +
             " +- " + Fixed(r.restart_ettr.sd, 4) + " (interval " + Fixed(r.search.interval_s, 0) +
             " s); lost_ratio " + Fixed(r.lost_ratio.mean, 4) + " +- " + Fixed(r.lost_ratio.sd, 4) +
             (r.all_finished ? "" : " (a job gave up)"));
    out->Emit(j);
  }
  return Status::Ok();
}

// The sweep's ranking, printed on stderr as it is put in the summary line.
json SummaryLine(const goodput::SweepResult& r, int gpus) {
  json ranking = json::array();
  // The largest change over the range swept, and the steepest slope at the base (they differ
  // for a threshold: spares below the auto count run out, above it they sit idle).
  std::string most_elastic;
  double steepest = 0;
  for (const goodput::Sensitivity& s : r.ranking) {
    ranking.push_back({{"input", s.input},
                       {"low_value", s.low_value},
                       {"low_lost_ratio", s.low_ratio},
                       {"high_value", s.high_value},
                       {"high_lost_ratio", s.high_ratio},
                       {"max_abs_delta", s.max_abs_delta},
                       {"elasticity", s.elasticity}});
    Progress("  " + s.input + ": lost_ratio " + Fixed(s.low_ratio, 4) + " at " +
             Fixed(s.low_value, 4) + ", " + Fixed(s.high_ratio, 4) + " at " +
             Fixed(s.high_value, 4) + " (base " + Fixed(r.base.lost_ratio.mean, 4) +
             ", elasticity " + Fixed(s.elasticity, 2) + ")");
    if (std::fabs(s.elasticity) > steepest) {
      steepest = std::fabs(s.elasticity);
      most_elastic = s.input;
    }
  }
  return {{"name", "goodput_sensitivity_summary"},
          {"gpus", gpus},
          {"base_lost_ratio", r.base.lost_ratio.mean},
          {"most_sensitive", r.ranking.empty() ? "" : r.ranking.front().input},
          {"most_elastic", most_elastic},
          {"ranking", ranking}};
}

Status GoodputCommand::RunSweep(int gpus, JsonLines* out) {
  goodput::SweepOptions o{gpus, gpus_per_node_, seed_, jobs_, search_jobs_};
  Progress("goodput: sensitivity at " + std::to_string(gpus) +
           " GPUs: each input halved and doubled");
  auto each = [&](const goodput::SweepPoint& pt) {
    out->Emit({{"name", "goodput_sensitivity"},
               {"gpus", gpus},
               {"input", pt.input},
               {"factor", pt.factor},
               {"value", pt.value},
               {"lost_ratio", OrNull(pt.result.lost_ratio.mean, pt.result.lost_ratio.count)},
               {"lost_ratio_sd", OrNull(pt.result.lost_ratio.sd, pt.result.lost_ratio.count)},
               {"rtft_ettr", pt.result.rtft_ettr.mean},
               {"restart_ettr", pt.result.restart_ettr.mean},
               {"restart_interval_s", pt.result.search.interval_s},
               {"seed", seed_},
               {"jobs", jobs_}});
  };
  RTFT_ASSIGN_OR_RETURN(goodput::SweepResult r, goodput::Sweep(inputs_, o, each));
  json summary = SummaryLine(r, gpus);
  summary["seed"] = seed_;
  summary["jobs"] = jobs_;
  out->Emit(summary);
  return Status::Ok();
}

int GoodputCommand::Run() {
  if (jobs_ < 1 || jobs_ > 10000 || search_jobs_ < 1 || search_jobs_ > 1000 || sweep_gpus_ < 0) {
    Progress("goodput: 1 <= --jobs <= 10000, 1 <= --search-jobs <= 1000, --sweep-gpus >= 0");
    return kExitUsage;
  }
  StatusOr<std::vector<uint64_t>> gpus = ParseCountList(gpus_);
  Status s = gpus.ok() ? LoadInputs() : gpus.status();
  if (!s.ok()) {
    Progress("goodput: " + s.ToString());
    return kExitUsage;
  }
  PrintInputs();
  JsonLines out;
  s = RunSizes(*gpus, &out);
  const int sweep_gpus = sweep_gpus_ > 0
                             ? sweep_gpus_
                             : static_cast<int>(*std::max_element(gpus->begin(), gpus->end()));
  if (s.ok() && !no_sweep_) s = RunSweep(sweep_gpus, &out);
  if (!s.ok()) {
    Progress("goodput: " + s.ToString());
    // Only bad inputs fail here: the simulation itself has nothing to fail on.
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  if (!plot_.empty()) WritePlot(plot_, out.lines());
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewGoodputCommand() { return std::make_unique<GoodputCommand>(); }

}  // namespace rtft::bench
