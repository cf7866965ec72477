// `rtft-bench sdc`: how soon each silent data corruption is caught and what its repair costs
// (docs/protect.md, "Silent data corruption"). Real `mpirun --enable-recovery dp-launch --spares 1
// -- rtft-train` jobs of 3 ranks, one per fault, rank 1 corrupting its own data with rtft-train's
// hooks at its --at-th chance:
//   param_flip     a bit of its copy of the replicated parameters after an update (train.flip),
//                  caught by the cross-check of the copies, every rank back to the last
//                  step whose copies agreed;
//   grad_flip      a bit of its gradients once (train.grad_flip, RTFT_PROTECT_REPLAY_EVERY=1),
//                  caught by the replay and computed again;
//   faulty_device  the same at every step from then on: the slot is retired, a spare takes it;
//   nan            a NaN in its gradients once (train.grad_nan, RTFT_PROTECT_CHECK_FINITE=1).
// Each line: the step the corruption reached (the first step that computes with it), the step it
// was caught at, the latency in steps, the repair's time (what the log of the check or the
// recovery says it took), and whether every rank ended with the digest of a run without it.
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common/bench_command.h"
#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

struct Fault {
  const char* name;
  const char* point;   // rank 1's hook
  const char* action;  // flag (once) or flags (from then on)
  const char* env;     // the setting that catches it ("" for the default cross-check)
  // The step the corruption reaches, from the hook's --at-th chance: a flip after the update of
  // step at - 1 reaches step at; a gradient of the at-th local compute is step at - 1's.
  int step_offset;
};

constexpr Fault kFaults[] = {
    {"param_flip", "train.flip", "flag", "", 0},
    {"grad_flip", "train.grad_flip", "flag", "RTFT_PROTECT_REPLAY_EVERY", -1},
    {"faulty_device", "train.grad_flip", "flags", "RTFT_PROTECT_REPLAY_EVERY", -1},
    {"nan", "train.grad_nan", "flag", "RTFT_PROTECT_CHECK_FINITE", -1},
};

struct Outcome {
  int64_t caught_step = -1;
  double repair_s = -1;
  bool bitwise = false;
  std::string how;
};

std::vector<std::string> Digests(const std::string& out) {
  static const std::regex done(
      R"(\[train \d+\] done steps=\d+ loss_ema=\S+ digest=([0-9a-f]{16}))");
  std::vector<std::string> d;
  for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it)
    d.push_back((*it)[1]);
  return d;
}

// What the job's log says of the fault: the step it was caught at and what the repair took.
Outcome Read(const Fault& f, const std::string& out) {
  Outcome o;
  std::smatch m;
  // Bounded digits: std::stoll and std::stod never see a number out of their range.
  static const std::regex corrupt(R"(held a corrupt copy at step (\d{1,12}))");
  static const std::regex recovered(
      R"(\[train 1\] recovered epoch=\d+ step=\d+ .* took_s=([0-9.]{1,20}))");
  static const std::regex replayed(
      R"(silent data corruption: at step (\d{1,12}) the gradients of data-parallel rank 1 [^;]*; ([^(\n]*) \(([0-9.]{1,20}) ms\))");
  static const std::regex nonfinite(
      R"(at step (\d{1,12}) the gradients of data-parallel rank\(s\) 1 are finite when computed again: ([^(\n]*) \(([0-9.]{1,20}) ms\))");
  const std::string name = f.name;
  if (name == "param_flip") {
    if (std::regex_search(out, m, corrupt)) o.caught_step = std::stoll(m[1]);
    if (std::regex_search(out, m, recovered)) o.repair_s = std::stod(m[1]);
    static const std::regex back(R"(; (back to step \d{1,12}), the last whose copies agreed)");
    o.how = std::regex_search(out, m, back)
                ? "the copies' cross-check; every rank " + m[1].str() + ", run again"
                : "the copies' cross-check; the copy fed from a peer, the step run again";
  } else if (name == "nan") {
    if (std::regex_search(out, m, nonfinite)) {
      o.caught_step = std::stoll(m[1]);
      o.repair_s = std::stod(m[3]) / 1000.0;
      o.how = m[2];
    }
  } else if (std::regex_search(out, m, replayed)) {
    o.caught_step = std::stoll(m[1]);
    o.how = m[2];
    o.repair_s = std::stod(m[3]) / 1000.0;
    // A faulty device's repair goes on: its slot is retired and the spare takes its rank.
    if (name == "faulty_device" && std::regex_search(out, m, recovered))
      o.repair_s += std::stod(m[1]);
  }
  return o;
}

class SdcCommand final : public BenchCommand {
 public:
  const char* name() const override { return "sdc"; }
  const char* help() const override {
    return "silent data corruption: a flipped parameter, a flipped gradient once and at every "
           "step, a NaN gradient; the step each is caught at and what its repair takes (3 ranks "
           "+ a spare under mpirun + dp-launch)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--steps", steps_, "steps per job")->capture_default_str();
    cmd->add_option("--at", at_, "rank 1 corrupts its data at this chance of its hook")
        ->capture_default_str();
    cmd->add_option("--hidden", hidden_, "hidden width of the trainer's MLP")
        ->capture_default_str();
    cmd->add_option("--batch", batch_, "samples per rank and step")->capture_default_str();
  }
  int Run() override;

 private:
  StatusOr<std::string> Job(const std::string& name, const std::string& fault,
                            const std::map<std::string, std::string>& env) const {
    RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
    BenchJob job(dir, 4);
    std::vector<std::string> extra = {"--steps", std::to_string(steps_), "--log-every", "1000000"};
    if (!fault.empty()) extra.insert(extra.end(), {"--fault", fault});
    RTFT_RETURN_IF_ERROR(job.Start(TrainJobArgs(3, hidden_, batch_, {}, extra), env));
    Status s = job.Wait(milliseconds(600000));
    if (!s.ok()) return s.Annotate(name + " (see " + dir + "/mpirun.out)");
    std::string out = job.Output();
    (void)RemoveTree(dir);
    return out;
  }

  int steps_ = 40, at_ = 20, hidden_ = 256, batch_ = 8;
};

int SdcCommand::Run() {
  if (steps_ < 4 || at_ < 2 || at_ + 2 > steps_ || hidden_ < 1 || batch_ < 1) {
    Progress("sdc: --steps >= 4, 2 <= --at <= --steps - 2, --hidden and --batch >= 1");
    return kExitUsage;
  }
  if (const std::string missing = MissingTool({"dp-launch", "rtft-train"}); !missing.empty()) {
    Progress("sdc: " + missing + " is not built");
    return kExitUsage;
  }
  Progress("sdc: the reference run, without a fault");
  StatusOr<std::string> ref = Job("reference", "", {});
  const std::vector<std::string> want = ref.ok() ? Digests(*ref) : std::vector<std::string>{};
  if (want.size() != 3) {
    Progress("sdc: the reference run did not finish: " + ref.status().ToString());
    return kExitFailed;
  }
  JsonLines out;
  for (const Fault& f : kFaults) {
    Progress(std::string("sdc: ") + f.name);
    std::map<std::string, std::string> env;
    if (*f.env) env[f.env] = "1";
    const std::string spec =
        std::string("1:") + f.point + "@" + std::to_string(at_) + ":" + f.action;
    StatusOr<std::string> run = Job(f.name, spec, env);
    if (!run.ok()) {
      Progress("sdc: " + run.status().ToString());
      return kExitFailed;
    }
    const Outcome o = Read(f, *run);
    const std::vector<std::string> got = Digests(*run);
    const int64_t reached = at_ + f.step_offset;
    out.Emit({{"name", "sdc"},
              {"fault", f.name},
              {"ranks", 3},
              {"setting", *f.env ? std::string(f.env) + "=1" : std::string("(defaults)")},
              {"reached_step", reached},
              {"caught_step", o.caught_step},
              {"latency_steps", o.caught_step < 0 ? -1 : o.caught_step - reached},
              {"repair_s", o.repair_s},
              {"how", o.how},
              {"caught", o.caught_step >= 0},
              {"bitwise", got == want}});
  }
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewSdcCommand() { return std::make_unique<SdcCommand>(); }

}  // namespace rtft::bench
