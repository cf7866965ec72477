// The `rtft-bench detect` subcommand: detection in real dp-launch jobs (detect_bench.h) or, with
// --sim, simulated agents against one in-process coordinator (detect_sim.h).
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "bench/common/bench_command.h"
#include "bench/common/bench_util.h"
#include "bench/detect/detect_bench.h"
#include "sim/detect_sim.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

class DetectCommand : public BenchCommand {
 public:
  const char* name() const override { return "detect"; }
  const char* help() const override {
    return "failure detection: real dp-launch jobs of 4..16 slots, or --sim: 64..4096 simulated "
           "agents against one coordinator";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_flag("--sim", sim_, "simulated agents (threads) against one in-process coordinator");
    cmd->add_option("--agents", agents_, "agent counts, comma-separated")->capture_default_str();
    cmd->add_option("--heartbeat-ms", heartbeat_ms_, "heartbeat period")->capture_default_str();
    cmd->add_option("--heartbeat-timeout-ms", timeout_ms_, "heartbeat timeout")
        ->capture_default_str();
    cmd->add_option("--window-s", window_s_, "steady-state measurement per agent count")
        ->capture_default_str();
    AddDetectRealFlags(cmd, &real_, &real_slots_);  // detect_bench.cc: real processes
    AddDetectHangFlags(cmd, &hang_);                // hang_bench.cc
    cmd->add_option("--driver-threads", threads_, "threads that drive the simulated agents")
        ->capture_default_str();
  }
  int Run() override {
    if (hang_.hang) {
      if (sim_) {
        std::cerr << "rtft-bench detect: --hang runs real jobs, not --sim\n";
        return kExitUsage;
      }
      JsonLines out;
      Status s = RunDetectHang(hang_, real_.repeats, &out);
      if (!s.ok()) std::cerr << "rtft-bench detect --hang: " << s << "\n";
      return s.ok()                                     ? kExitOk
             : s.code() == StatusCode::kInvalidArgument ? kExitUsage
             : s.code() == StatusCode::kNotFound        ? kExitUsage
                                                        : kExitFailed;
    }
    if (!sim_) {
      real_.heartbeat_ms = heartbeat_ms_;
      real_.heartbeat_timeout_ms = timeout_ms_;
      JsonLines out;
      Status s = RunDetectReal(real_, real_slots_, &out);
      if (!s.ok()) std::cerr << "rtft-bench detect: " << s << "\n";
      return s.ok() ? kExitOk : s.code() == StatusCode::kNotFound ? kExitUsage : kExitFailed;
    }
    DetectSimOptions o;
    auto counts = ParseCountList(agents_);
    if (!counts.ok() || heartbeat_ms_ <= 0 || timeout_ms_ < 2 * heartbeat_ms_ || threads_ < 1) {
      std::cerr << "rtft-bench detect: bad --agents, --heartbeat-ms, --heartbeat-timeout-ms "
                   "or --driver-threads\n";
      return kExitUsage;
    }
    for (uint64_t c : *counts) {
      if (c < 2 || c > 16384) {
        std::cerr << "rtft-bench detect: agent counts must be in [2, 16384]\n";
        return kExitUsage;
      }
    }
    o.agents = *counts;
    o.heartbeat_period = milliseconds(heartbeat_ms_);
    o.heartbeat_timeout = milliseconds(timeout_ms_);
    o.window_s = window_s_;
    o.driver_threads = threads_;
    JsonLines out;
    Status s = RunDetectSim(o, &out);
    if (!s.ok()) {
      std::cerr << "rtft-bench detect: " << s << "\n";
      return kExitFailed;
    }
    return kExitOk;
  }

 private:
  bool sim_ = false;
  DetectRealOptions real_;
  DetectHangOptions hang_;
  std::string real_slots_;
  std::string agents_ = "64,256,1024,4096";
  int64_t heartbeat_ms_ = 100;
  int64_t timeout_ms_ = 1000;
  double window_s_ = 3.0;
  int threads_ = 2;
};

}  // namespace

std::unique_ptr<BenchCommand> NewDetectCommand() { return std::make_unique<DetectCommand>(); }

}  // namespace rtft::bench
