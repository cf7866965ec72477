// `rtft-bench protect`'s node budget (docs/benchmarks.md, "A node's budget"): the protection's
// host memory traffic and CPU time per rank and protected step, as the trainers counted them
// (rtft-train's "done" line: L1's copied and hashed bytes, L2's bytes, each thread's CPU seconds),
// and what a node of N such ranks would ask of its host, against the host's measured triad.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rtft::bench {

// One run's ranks, their mean, per protected step.
struct RankBudget {
  double l1_copied_bytes = 0;                  // written into the L1 snapshot by the capture
  double l1_hashed_bytes = 0;                  // read by L1's checksums
  double l2_bytes = 0;                         // L2's replica bytes sent and received
  std::map<std::string, double> thread_cpu_s;  // by thread name
};

// From a run's output, each of `ranks` ranks' "done" line; nullopt when a line lacks the
// counters (a trainer older than them) or a rank ran no protected step.
std::optional<RankBudget> ParseBudget(const std::string& out, int ranks);

struct NodeInputs {
  double step_s_on = 0;       // the protected step
  double cpu_extra_s = 0;     // the protection's CPU seconds per step (every thread, per rank)
  uint64_t state_bytes = 0;   // protected state per rank
  int node_ranks = 8;         // ranks a node would hold
  double triad_gb_per_s = 0;  // the host's memory bandwidth (bytes the triad really moved)
  int host_cores = 0;         // this host's hardware threads
};

// The "protect-node" line: the median run's figures per rank and step, and the node's: host GB/s
// and cores asked for, their share of this host's, and the state per rank a node could protect
// every step at this step time (bytes and CPU scale with the state: a linear estimate).
nlohmann::json NodeBudget(const std::vector<RankBudget>& runs, const NodeInputs& in);

}  // namespace rtft::bench
