#include "bench/recovery/recovery_sim_flags.h"
#include <CLI/CLI.hpp>
#include "sim/recovery_sim.h"

#include <chrono>

#include "bench/common/bench_command.h"
#include "bench/common/bench_util.h"

namespace rtft::bench {

void RecoverySimFlags::AddFlags(CLI::App* cmd) {
  // --sim: the protocol at scale against one in-process coordinator (recovery_sim.h).
  cmd->add_flag("--sim", sim, "simulated agents against one in-process coordinator");
  cmd->add_option("--agents", agents, "--sim: agent counts, comma-separated")
      ->capture_default_str();
  cmd->add_option("--repeats", repeats, "--sim: runs per agent count and case (the median)")
      ->capture_default_str();
  cmd->add_option("--cases", cases,
                  "--sim: one (a failure), two (a second 100 ms later), during (a second "
                  "during the gather), comma-separated")
      ->capture_default_str();
  cmd->add_option("--sim-coordinator-cpus", coordinator_cpus,
                  "--sim: the coordinator's threads on these CPUs (e.g. 0-1), the simulated "
                  "agents on the others (default: both anywhere)");
  cmd->add_option("--sim-gloo-rings", gloo_rings,
                  "--sim: Gloo communicators of the next epoch meeting through ring pairs "
                  "(the L2 replication's streams), after the training one's key (0 to 16)")
      ->capture_default_str();
}

int RecoverySimFlags::Run(int heartbeat_timeout_ms, int heartbeat_ms) const {
  RecoverySimOptions o;
  auto counts = ParseCountList(agents);
  if (!counts.ok() || repeats < 1 || heartbeat_timeout_ms < 200 || heartbeat_ms < 1 ||
      heartbeat_ms >= heartbeat_timeout_ms) {
    Progress(
        "recovery --sim: bad --agents or --repeats, or not 1 <= --heartbeat-ms < "
        "--heartbeat-timeout-ms (>= 200)");
    return kExitUsage;
  }
  for (uint64_t c : *counts) {
    if (c < 8 || c > 16384) {
      Progress("recovery --sim: agent counts must be in [8, 16384]");
      return kExitUsage;
    }
  }
  o.agents = *counts;
  auto parsed_cases = ParseChoiceList(cases, {"one", "two", "during"});
  if (!parsed_cases.ok()) {
    Progress("recovery --sim: --cases takes one, two and during");
    return kExitUsage;
  }
  o.cases = *parsed_cases;
  if (!coordinator_cpus.empty()) {
    auto cpus = ParseCpuList(coordinator_cpus);
    if (!cpus.ok()) {
      Progress("recovery --sim: --sim-coordinator-cpus: " + cpus.status().ToString());
      return kExitUsage;
    }
    o.coordinator_cpus = *cpus;
  }
  if (gloo_rings < 0 || gloo_rings > 16) {
    Progress("recovery --sim: --sim-gloo-rings must be in [0, 16]");
    return kExitUsage;
  }
  o.gloo_rings = gloo_rings;
  o.repeats = repeats;
  o.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  o.heartbeat_period = std::chrono::milliseconds(heartbeat_ms);
  JsonLines out;
  const Status s = RunRecoverySim(o, &out);
  if (!s.ok()) {
    Progress("recovery --sim: " + s.ToString());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace rtft::bench
