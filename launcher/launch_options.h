// dp-launch's settings: each command-line option is also an RTFT_* variable (core/param_list.h);
// a flag wins over the variable, the variable over the default. Used by main.cc and the agent.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "control/coordinator/hang_detector.h"
#include "control/coordinator/straggler_detector.h"
#include "control/wire/types.h"
#include "launcher/child_process.h"
#include "rtft/status.h"

namespace CLI {  // CLI11: only the .cc files that add flags include it
class App;
}  // namespace CLI

namespace rtft::launch {

struct LaunchOptions {
  int32_t spares = 0;
  // --coordinator-slot dedicated: slot 0 runs only the coordinator, no agent and no application.
  bool dedicated_coordinator = false;
  // --standby-coordinator auto: with a shared coordinator, every other slot runs one that can
  // become the standby (LaunchOptions::StandbyIn says whether a job of N slots has one).
  bool standby_coordinator = true;
  // RTFT_CTRL_TEST_PARTITION (test hook; empty: none).
  std::string test_partition_file;
  bool StandbyIn(int slots) const {
    return standby_coordinator && !dedicated_coordinator && slots >= 3;
  }
  std::chrono::milliseconds heartbeat{100};
  std::chrono::milliseconds heartbeat_timeout{1000};
  int32_t max_restarts_per_slot = 3;
  control::SparesExhaustedPolicy on_spares_exhausted =
      control::SparesExhaustedPolicy::kCheckpointAndExit;
  // --grid TxP: the job's tensor and pipeline degrees, for a shrink of whole replicas.
  int32_t grid_tensor = 1, grid_pipeline = 1;
  std::chrono::seconds watchdog{300};   // 0: off
  control::HangOptions hang;            // the coordinator's hang detector (k 0: off)
  control::StragglerOptions straggler;  // its straggler detector (percent 0: off)
  // A spare's health check (agent_health.cc): every period (0: off), bounded by the timeout,
  // with this program (empty: rtft-health beside dp-launch).
  std::chrono::seconds health_period{600};
  std::chrono::seconds health_timeout{60};
  std::string health_check;
  std::string log_level;
  std::string job_key_file;
  std::chrono::seconds join_timeout{60};
  std::chrono::seconds shutdown_grace{30};
  std::string exit_code_file;
  IsolationPolicy isolation = IsolationPolicy::kAuto;
  int32_t gpus_per_node = 0;         // --gpus-per-node; 0: auto (launcher/gpu_slot.h counts them)
  std::vector<std::string> command;  // APP [ARGS]
};

// Raw text of the flags as CLI11 fills them; empty means "not given".
struct LaunchFlags {
  std::string spares, coordinator_slot, standby_coordinator, heartbeat_ms, heartbeat_timeout_ms;
  std::string max_restarts_per_slot;
  std::string on_spares_exhausted, grid, watchdog_s, log_level, job_key_file, join_timeout_s;
  std::string shutdown_grace_s, exit_code_file, app_isolation, gpus_per_node;
  std::string hang_k, hang_min_ms, hang_first_step_s;
  std::string straggler_pct, straggler_window;
  std::string health_period_s, health_timeout_s, health_check;
  bool print_config = false;
  std::vector<std::string> command;
};

void AddLaunchFlags(CLI::App* app, LaunchFlags* flags);
// Flags over RTFT_* variables over defaults; checks ranges. The command may be empty here
// (--print-config); main.cc requires it otherwise.
StatusOr<LaunchOptions> ResolveOptions(const LaunchFlags& flags);
// Every RTFT_* parameter with its default and current value (--print-config).
std::string FormatConfig();

}  // namespace rtft::launch
