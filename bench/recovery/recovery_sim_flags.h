// `rtft-bench recovery --sim`'s own flags and their run: checked, turned into RecoverySimOptions
// (sim/recovery_sim.h) and run. The heartbeat flags are the command's, shared with the real jobs.
#pragma once

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace rtft::bench {

struct RecoverySimFlags {
  bool sim = false;
  std::string agents = "64,256,1024,4096";
  std::string cases = "one,two,during";
  int repeats = 3;
  std::string coordinator_cpus;
  int gloo_rings = 2;

  void AddFlags(CLI::App* cmd);
  // The simulation's exit code (kExitOk, kExitUsage for a bad flag, kExitFailed).
  int Run(int heartbeat_timeout_ms, int heartbeat_ms) const;
};

}  // namespace rtft::bench
