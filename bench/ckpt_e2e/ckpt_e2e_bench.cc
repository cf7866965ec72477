#include "bench/ckpt_e2e/ckpt_e2e_bench.h"
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"
#include "rtft/checkpoint.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

class CkptE2eCommand final : public BenchCommand {
 public:
  const char* name() const override { return "ckpt-e2e"; }
  const char* help() const override {
    return "end-to-end checkpoint cost: rtft-train's iteration time with an rt-ft checkpoint "
           "every N steps, with a blocking (torch.save-like) save of the same state, and with "
           "none (variants interleaved over repeats)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--ranks", ranks_, "active ranks (with a spare, under dp-launch)")
        ->capture_default_str();
    cmd->add_option("--every", every_, "a checkpoint every N steps")->capture_default_str();
    cmd->add_option("--steps", steps_, "steps per run")->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_,
                    "samples per rank and step (0: the batch of a --step-s step here)")
        ->capture_default_str();
    cmd->add_option("--step-s", step_s_, "the step time --batch 0 aims at")->capture_default_str();
    cmd->add_option("--dir", dir_, "where the checkpoints go (a real disk, not tmpfs)")
        ->capture_default_str();
    dev_.AddFlags(cmd);
    cmd->add_option("--repeats", repeats_, "runs of each variant")->capture_default_str();
  }
  int Run() override;

 private:
  StatusOr<TrainTimes> OneRun(const std::string& variant, int batch);

  int ranks_ = 1, every_ = 10, steps_ = 63, hidden_ = 1024, batch_ = 0, repeats_ = 3;
  double step_s_ = 0.3;
  std::string dir_ = "/var/tmp";
  TrainDevice dev_;
};

StatusOr<TrainTimes> CkptE2eCommand::OneRun(const std::string& variant, int batch) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir(dir_));
  const std::string ckpt = dir + "/ckpt";
  const std::string every = std::to_string(every_);
  std::vector<std::string> args = {"--steps", std::to_string(steps_), "--log-every", "1000000"};
  if (variant == "none") {
    args.insert(args.end(), {"--no-protect"});
  } else if (variant == "rtft") {
    args.insert(args.end(), {"--protect-every", every, "--l3-every", every, "--ckpt-dir", ckpt});
  } else {
    args.insert(args.end(), {"--no-protect", "--blocking-save-every", every, "--ckpt-dir", ckpt});
  }
  const std::vector<std::string> d = dev_.Args();
  args.insert(args.end(), d.begin(), d.end());
  auto t = RunTrainTimed(dir, ranks_, hidden_, batch, args, milliseconds(1800000));
  if (!t.ok()) return t.status().Annotate("the " + variant + " run");
  // Each variant wrote what it was timed for: rt-ft committed L3 versions past step 0, the
  // blocking save rank 0's state.
  if (variant == "rtft") {
    auto v = LatestVersion(ckpt);
    if (!v.ok() || *v < static_cast<uint64_t>(every_))
      return Status::Internal("the rtft run committed no L3 version past step 0 in " + ckpt);
  } else if (variant == "blocking") {
    struct stat st {};
    const std::string file = ckpt + "/blocking-rank-0.bin";
    if (::stat(file.c_str(), &st) != 0 || st.st_size <= 0)
      return Status::Internal("the blocking run did not write its state to " + file);
  }
  (void)RemoveTree(dir);
  return t;
}

int CkptE2eCommand::Run() {
  // The trainer leaves its first three steps out of the mean: each run times several intervals.
  if (ranks_ < 1 || repeats_ < 1 || every_ < 1 || steps_ < 3 + 2 * every_ || batch_ < 0 ||
      !(step_s_ > 0)) {
    Progress(
        "ckpt-e2e: --ranks >= 1, --repeats >= 1, --every >= 1, --steps >= 3 + 2 x --every, "
        "--batch >= 0, --step-s > 0");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("ckpt-e2e: " + missing + " is not built");
    return kExitUsage;
  }
  int batch = batch_;
  if (batch == 0) {
    auto b = CalibrateBatch(ranks_, hidden_, step_s_, dev_.Args());
    if (!b.ok()) {
      Progress("ckpt-e2e: " + b.status().ToString());
      return kExitFailed;
    }
    batch = *b;
  }
  const std::vector<std::string> variants = {"none", "rtft", "blocking"};
  std::map<std::string, std::vector<double>> steps;
  uint64_t state_bytes = 0;
  for (int r = 0; r < repeats_; ++r) {
    for (const std::string& v : variants) {
      Progress("ckpt-e2e: run " + std::to_string(r + 1) + " of " + std::to_string(repeats_) + ", " +
               v);
      auto t = OneRun(v, batch);
      if (!t.ok()) {
        Progress("ckpt-e2e: " + t.status().ToString());
        return kExitFailed;
      }
      steps[v].push_back(t->step_s);
      if (v == "rtft") state_bytes = t->state_bytes;
    }
  }
  const double none = Median(steps["none"]);
  const double rtft = Median(steps["rtft"]), blocking = Median(steps["blocking"]);
  const double rtft_pct = (rtft / none - 1.0) * 100.0;
  const double blocking_pct = (blocking / none - 1.0) * 100.0;
  JsonLines out;
  out.Emit({{"name", "ckpt_e2e"},
            {"ranks", ranks_},
            {"device", dev_.Name()},
            {"ranks_share_gpu", dev_.cuda() && ranks_ > 1},
            {"state_bytes_per_rank", state_bytes},
            {"every", every_},
            {"batch", batch},
            {"steps", steps_},
            {"repeats", repeats_},
            {"step_s_none", none},
            {"step_s_rtft", rtft},
            {"step_s_blocking", blocking},
            {"step_s_none_runs", steps["none"]},
            {"step_s_rtft_runs", steps["rtft"]},
            {"step_s_blocking_runs", steps["blocking"]},
            {"overhead_pct_rtft", rtft_pct},
            {"overhead_pct_blocking", blocking_pct},
            // DataStates-LLM's claim, checked where it applies: at an interval at which the
            // blocking save costs 20 % or more, rt-ft within 2 % of no checkpoint.
            {"blocking_at_least_20_pct", blocking_pct >= 20.0},
            {"target_pct", 2.0},
            {"met", blocking_pct >= 20.0 && rtft_pct <= 2.0}});
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewCkptE2eCommand() { return std::make_unique<CkptE2eCommand>(); }

}  // namespace rtft::bench
