// The inputs of `rtft-bench goodput`: each with its unit, its allowed range and where its value
// came from (a documented default, a JSON line of `rtft-bench protect`, `recovery` or `ckpt`,
// the command line), and their translation into the simulation's parameters for one GPU count.
// Files and flags come from outside: every value is checked for type and range before use.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtft/status.h"
#include "sim/goodput_sim.h"

namespace rtft::bench::goodput {

struct Input {
  std::string name;  // snake_case: the JSON key; the flag is --name with '-' for '_'
  double value = 0;
  std::string unit;
  double min = 0, max = 0;  // allowed, inclusive
  bool integer = false;
  std::string source;  // where `value` came from
  std::string help;
};

class GoodputInputs {
 public:
  // Llama 3's failure model and the figures of docs/benchmarks.md's "Measured" sections, each
  // labelled.
  static GoodputInputs Defaults();

  const std::vector<Input>& all() const { return inputs_; }
  double Get(const std::string& name) const;  // a name of all(); anything else is a bug
  // InvalidArgument for an unknown name, a value out of range (NaN too) or not an integer.
  Status Set(const std::string& name, double value, const std::string& source);

  // The measured figures from a file of JSON lines each command prints (the last matching line
  // counts): protect's overhead_pct; recovery's detect_s, resumed_s and step_s of the process
  // and slot failures; recovery --sim's protocol_s of the one-failure case at its largest
  // agent count; ckpt's rt-ft line (persist_gbps, restore_device_gbps or restore_gbps,
  // blocking_s over bytes). InvalidArgument, naming the file and line, for anything else.
  Status ReadProtectJson(const std::string& path);
  Status ReadRecoveryJson(const std::string& path);
  Status ReadRecoverySimJson(const std::string& path);
  Status ReadCkptJson(const std::string& path);

  // {name: {"value", "unit", "source"}} for every input.
  nlohmann::json ToJson() const;

 private:
  Input* Find(const std::string& name);
  std::vector<Input> inputs_;
};

// The fewest spare nodes (one at least) that are all in repair at most `target` of the time:
// the nodes in repair are Poisson with mean nodes x node-loss rate x repair time, whatever the
// repair's distribution (process crashes send no node to repair).
int AutoSpares(int nodes, double node_losses_per_node_h, double repair_h, double target);
constexpr double kAutoSparesTarget = 0.01;

// The simulation's parameters for `gpus` GPUs in nodes of `gpus_per_node`; `derived` receives
// the values computed on the way (per-GPU bandwidths, times, spares), for the report.
StatusOr<SimParams> ToSimParams(const GoodputInputs& in, int gpus, int gpus_per_node,
                                nlohmann::json* derived);

}  // namespace rtft::bench::goodput
