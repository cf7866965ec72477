#include "bench/detect/detect_bench.h"
#include <CLI/CLI.hpp>

#include "bench/common/bench_job.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

// One job of the test application (tests/launcher/test_app.cc) under mpirun + dp-launch: where
// each rank stands, read from the application's slot logs.
class DetectJob {
 public:
  DetectJob(const DetectRealOptions& o, int slots, const std::string& dir)
      : o_(o), slots_(slots), job_(dir, slots) {}

  Status Start() {
    std::vector<std::string> args =
        DpLaunchArgs(slots_, o_.dp_launch,
                     {"--spares", "1", "--heartbeat-ms", std::to_string(o_.heartbeat_ms),
                      "--heartbeat-timeout-ms", std::to_string(o_.heartbeat_timeout_ms)});
    args.push_back(o_.app);
    return job_.Start(args, {{"RTFT_TEST_DIR", job_.dir()},
                             {"RTFT_TEST_STEPS", "100000"},
                             {"RTFT_TEST_STEP_MS", "50"}});
  }

  // The process holding `rank` now and its slot's dp-launch.
  bool Find(int rank, pid_t* app, pid_t* agent) const {
    int slot = -1;
    for (int s = 0; s < slots_; ++s)
      for (const Fields& l : Lines(job_.dir(), s, "start"))
        if (Num(l, "rank") == rank) slot = s;
    *app = slot < 0 ? 0 : SlotProcess(job_.Marker(), slot, "launcher-test-app");
    *agent = slot < 0 ? 0 : SlotAgent(job_.Marker(), slot);
    return *app > 0 && *agent > 0;
  }
  long long LastStep(int rank) const {
    long long last = -1;
    for (int s = 0; s < slots_; ++s)
      for (const Fields& l : Lines(job_.dir(), s, "step"))
        if (Num(l, "rank") == rank) last = std::max(last, Num(l, "step"));
    return last;
  }
  // Whether `rank`'s restarted process runs: a step line of the process that logged its resume
  // (each line names its process: id=). Not whether it caught up with the others: they step on
  // while it restarts, and it resumes from its predecessor's last step at the same pace.
  bool Resumed(int rank) const {
    std::set<long long> resumed;
    for (int s = 0; s < slots_; ++s)
      for (const Fields& l : Lines(job_.dir(), s, "resume"))
        if (Num(l, "rank") == rank) resumed.insert(Num(l, "id"));
    for (int s = 0; s < slots_; ++s)
      for (const Fields& l : Lines(job_.dir(), s, "step"))
        if (Num(l, "rank") == rank && resumed.count(Num(l, "id")) > 0) return true;
    return false;
  }
  // When slot 0's application received the event of `epoch` (realtime us), or -1.
  long long EventAt(long epoch) const {
    for (const Fields& l : Lines(job_.dir(), 0, "event"))
      if (Num(l, "epoch") == epoch) return Num(l, "t");
    return -1;
  }

 private:
  const DetectRealOptions& o_;
  const int slots_;
  BenchJob job_;
};

// Kills `victims` and returns the milliseconds until rank 0 hears of `epoch`.
StatusOr<double> Measure(const DetectJob& job, const std::vector<pid_t>& victims, long epoch,
                         milliseconds timeout) {
  const long long t0 = NowUs();
  for (pid_t p : victims) kill(p, SIGKILL);
  long long at = -1;
  if (!WaitUntil([&] { return (at = job.EventAt(epoch)) > 0; }, timeout))
    return Status::DeadlineExceeded("rank 0 saw no epoch " + std::to_string(epoch));
  return (at - t0) / 1000.0;
}

Status RunOne(const DetectRealOptions& o, int slots, JsonLines* out) {
  RTFT_ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("/tmp"));
  Status s = [&]() -> Status {
    DetectJob job(o, slots, dir);
    RTFT_RETURN_IF_ERROR(job.Start());
    const int actives = slots - 1;
    if (!WaitUntil(
            [&] {
              for (int r = 0; r < actives; ++r)
                if (job.LastStep(r) < 2) return false;
              return true;
            },
            milliseconds(60000)))
      return Status::DeadlineExceeded("the job's ranks did not start (see " + dir + ")");
    pid_t app, agent;
    if (!job.Find(1, &app, &agent)) return Status::Internal("rank 1 not found");
    auto crash = Measure(job, {app}, 2, milliseconds(10000));
    RTFT_RETURN_IF_ERROR(crash.status());
    nlohmann::json line = {{"bench", "detect"},       {"mode", "processes"},  {"slots", slots},
                           {"kind", "process_crash"}, {"latency_ms", *crash}, {"target_ms", 50},
                           {"met", *crash <= 50}};
    out->Emit(line);
    // Slot loss: the agent and the application of rank 2 (or 0's neighbour in a 2-rank job).
    const int victim = actives > 2 ? 2 : 1;
    if (!WaitUntil([&] { return job.Resumed(1); }, milliseconds(60000)))
      return Status::DeadlineExceeded("rank 1 did not resume after its restart (see " + dir + ")");
    if (!job.Find(victim, &app, &agent)) return Status::Internal("victim rank not found");
    auto lost = Measure(job, {agent, app}, 3, milliseconds(10 * o.heartbeat_timeout_ms + 10000));
    RTFT_RETURN_IF_ERROR(lost.status());
    const double target = 1.5 * static_cast<double>(o.heartbeat_timeout_ms);
    line = {{"bench", "detect"},
            {"mode", "processes"},
            {"slots", slots},
            {"kind", "slot_loss"},
            {"latency_ms", *lost},
            {"heartbeat_ms", o.heartbeat_ms},
            {"heartbeat_timeout_ms", o.heartbeat_timeout_ms},
            {"target_ms", target},
            {"met", *lost <= target}};
    out->Emit(line);
    return Status::Ok();
  }();
  if (s.ok()) (void)RemoveTree(dir);
  return s;
}

}  // namespace

void AddDetectRealFlags(CLI::App* cmd, DetectRealOptions* o, std::string* slots_text) {
  cmd->add_option("--slots", *slots_text, "real processes: slot counts (mpirun -np), comma list")
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "real processes: jobs per slot count")
      ->capture_default_str();
  cmd->add_option("--dp-launch", o->dp_launch, "dp-launch binary (default: next to rtft-bench)");
  cmd->add_option("--app", o->app, "test application (default: <build>/tests/launcher-test-app)");
}

Status RunDetectReal(DetectRealOptions o, const std::string& slots_text, JsonLines* out) {
  if (!slots_text.empty()) {
    RTFT_ASSIGN_OR_RETURN(o.slots, ParseCountList(slots_text));
  }
  const std::string self = SelfPath();
  const std::string bin = self.substr(0, self.rfind('/'));
  if (o.dp_launch.empty()) o.dp_launch = bin + "/dp-launch";
  if (o.app.empty()) o.app = bin + "/../tests/launcher-test-app";
  for (const auto& p : {o.dp_launch, o.app})
    if (access(p.c_str(), X_OK) != 0) return Status::NotFound(p + " is not built");
  for (uint64_t n : o.slots) {
    if (n < 3) return Status::InvalidArgument("--slots: at least 3 (2 ranks and a spare)");
    for (int r = 0; r < o.repeats; ++r) {
      Progress("detect: " + std::to_string(n) + " slots, run " + std::to_string(r + 1));
      RTFT_RETURN_IF_ERROR(RunOne(o, static_cast<int>(n), out));
    }
  }
  return Status::Ok();
}

}  // namespace rtft::bench
