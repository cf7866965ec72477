// `rtft-bench detect --hang`: how long a hung rank holds a job, from the moment it hangs to the
// moment its job's recovery starts, with the coordinator's hang detector (its defaults)
// against the path without it, the agent's progress watchdog (`--watchdog-s`, lowered to a few
// seconds here: its default is 300 s). Real `mpirun --enable-recovery dp-launch --spares 1 --
// rtft-train` jobs of 3 ranks; rank 1 blocks forever in its update (`protect.update:hang`).
#include <CLI/CLI.hpp>
#include <regex>
#include <string>

#include "bench/common/bench_job.h"
#include "bench/detect/detect_bench.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// From the hang (the fault line's t=, us) to the recovery's start: the first rank that hears of
// the new epoch, sees its collective fail, or starts again (the watchdog kills every rank, whose
// steps all stopped), by the ranks' t= (s), both wall clock.
StatusOr<double> HangToRecoveryMs(const BenchJob& job) {
  static const std::regex fault(R"(fault protect\.update hang .* t=(\d{1,19}))");
  static const std::regex start(
      R"(\[train \d+\] (?:event epoch=2 |failure step=|up role=restarted ).* t=(\d{1,12}(?:\.\d{1,9})?))");
  const std::string faults = ReadFile(job.dir() + "/faults.log");
  const std::string out = job.Output();
  std::smatch f;
  if (!std::regex_search(faults, f, fault))
    return Status::Internal("the hang never came (see " + job.dir() + ")");
  double first = -1;
  for (std::sregex_iterator it(out.begin(), out.end(), start), end; it != end; ++it) {
    const double t = std::stod((*it)[1]) * 1000.0;
    if (first < 0 || t < first) first = t;
  }
  if (first < 0) return Status::Internal("no rank recovered (see " + job.dir() + "/mpirun.out)");
  return first - std::stod(f[1]) / 1000.0;
}

StatusOr<double> RunOne(const DetectHangOptions& o, bool detector) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  auto ms = [&]() -> StatusOr<double> {
    BenchJob job(dir, 4);
    // The detector's run keeps the default watchdog (300 s), which never acts first.
    std::vector<std::string> dp;
    if (!detector) dp = {"--hang-k", "0", "--watchdog-s", std::to_string(o.watchdog_s)};
    RTFT_RETURN_IF_ERROR(job.Start(
        TrainJobArgs(3, o.hidden, o.batch, dp,
                     {"--steps", std::to_string(o.steps), "--log-every", "1000000", "--fault",
                      "1:protect.update@" + std::to_string(o.steps / 2) + ":hang"})));
    RTFT_RETURN_IF_ERROR(job.Wait(milliseconds(1000 * (o.watchdog_s + 180))));
    return HangToRecoveryMs(job);
  }();
  if (ms.ok()) (void)RemoveTree(dir);
  return ms;
}

}  // namespace

void AddDetectHangFlags(CLI::App* cmd, DetectHangOptions* o) {
  cmd->add_flag("--hang", o->hang,
                "a rank hung in its update: the hang detector against the watchdog");
  cmd->add_option("--watchdog-s", o->watchdog_s, "--hang: the watchdog of the path without it")
      ->capture_default_str();
}

Status RunDetectHang(const DetectHangOptions& o, int repeats, JsonLines* out) {
  if (o.watchdog_s < 1 || o.watchdog_s > 3600)
    return Status::InvalidArgument("--watchdog-s: 1 to 3600");
  const std::string missing = MissingTool({"dp-launch", "rtft-train"});
  if (!missing.empty()) return Status::NotFound(missing + " is not built");
  for (int r = 0; r < repeats; ++r) {
    Progress("detect --hang: run " + std::to_string(r + 1) + " of " + std::to_string(repeats));
    RTFT_ASSIGN_OR_RETURN(double detector, RunOne(o, true));
    RTFT_ASSIGN_OR_RETURN(double watchdog, RunOne(o, false));
    // The bound with default settings: 2 s (RTFT_HANG_MIN_MS) past the peers' last progress,
    // and a heartbeat period and a coordinator scan on top.
    const double target_ms = 2500;
    out->Emit({{"bench", "detect"},
               {"kind", "hang"},
               {"ranks", 3},
               {"hang_to_recovery_ms", detector},
               {"target_ms", target_ms},
               {"met", detector <= target_ms},
               {"watchdog_s", o.watchdog_s},
               {"watchdog_hang_to_recovery_ms", watchdog},
               {"watchdog_over_detector", watchdog / detector}});
  }
  return Status::Ok();
}

}  // namespace rtft::bench
