// `rtft-bench detect`: detection latency of a process crash and of a lost slot
// in real `mpirun --enable-recovery dp-launch` jobs of 4 to 16 slots on this machine, measured
// from the SIGKILL to the moment a surviving rank's application receives the new epoch.
// Targets (docs/benchmarks.md, "rtft-bench recovery"): crash <= 50 ms, slot loss <= 1.5x heartbeat
// timeout. With --sim the subcommand runs detect_sim.h's simulation instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/bench_command.h"
#include "bench/common/bench_util.h"

namespace CLI {  // CLI11: only the .cc files that add flags include it
class App;
}  // namespace CLI

namespace rtft::bench {

struct DetectRealOptions {
  std::vector<uint64_t> slots = {4, 8, 16};
  int64_t heartbeat_ms = 100;
  int64_t heartbeat_timeout_ms = 1000;
  int repeats = 1;
  std::string dp_launch;  // default: dp-launch next to rtft-bench
  std::string app;        // default: <build>/tests/launcher-test-app
};

// --slots, --repeats, --dp-launch, --app (the heartbeat flags are the detect command's).
void AddDetectRealFlags(CLI::App* cmd, DetectRealOptions* options, std::string* slots_text);
// One JSON line per slot count and failure kind.
Status RunDetectReal(DetectRealOptions options, const std::string& slots_text, JsonLines* out);

// --hang (hang_bench.cc): a rank hung in its update of a 3-rank rtft-train job, the time from
// the hang to the survivors' recovery event with the coordinator's hang detector (default
// settings) and without it (the watchdog at `watchdog_s`).
struct DetectHangOptions {
  bool hang = false;
  int64_t watchdog_s = 5;
  int steps = 400;
  int hidden = 192;
  int batch = 8;
};
void AddDetectHangFlags(CLI::App* cmd, DetectHangOptions* options);
// One JSON line per repeat.
Status RunDetectHang(const DetectHangOptions& options, int repeats, JsonLines* out);

// The `detect` subcommand: real processes, or with --sim the simulation (detect_command.cc).
std::unique_ptr<BenchCommand> NewDetectCommand();

}  // namespace rtft::bench
