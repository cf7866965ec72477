#include "bench/protect/protect_budget.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <regex>

#include "bench/common/bench_util.h"

namespace rtft::bench {

std::optional<RankBudget> ParseBudget(const std::string& out, int ranks) {
  static const std::regex done(
      R"(\[train (\d+)\] done .* l2_bytes=(\d+) .*)"
      R"(protected_steps=(\d+) l1_copied_bytes=(\d+) l1_hashed_bytes=(\d+))"
      R"( threads_cpu_s=(\S*))");
  static const std::regex thread(R"(([^,:]+):([0-9.]+))");
  RankBudget b;
  int seen = 0;
  try {  // the numbers come from other processes: one too large for a double is refused
    for (auto it = std::sregex_iterator(out.begin(), out.end(), done); it != std::sregex_iterator();
         ++it) {
      const double steps = std::stod((*it)[3]);
      if (!(steps > 0)) return std::nullopt;
      b.l2_bytes += std::stod((*it)[2]) / steps;
      b.l1_copied_bytes += std::stod((*it)[4]) / steps;
      b.l1_hashed_bytes += std::stod((*it)[5]) / steps;
      const std::string threads = (*it)[6];
      for (auto t = std::sregex_iterator(threads.begin(), threads.end(), thread);
           t != std::sregex_iterator(); ++t)
        b.thread_cpu_s[(*t)[1]] += std::stod((*t)[2]) / steps;
      ++seen;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (seen != ranks || ranks < 1) return std::nullopt;
  b.l1_copied_bytes /= ranks;
  b.l1_hashed_bytes /= ranks;
  b.l2_bytes /= ranks;
  for (auto& [name, s] : b.thread_cpu_s) s /= ranks;
  return b;
}

nlohmann::json NodeBudget(const std::vector<RankBudget>& runs, const NodeInputs& in) {
  std::vector<double> copied, hashed, l2;
  std::map<std::string, std::vector<double>> threads;
  for (const RankBudget& r : runs) {
    copied.push_back(r.l1_copied_bytes);
    hashed.push_back(r.l1_hashed_bytes);
    l2.push_back(r.l2_bytes);
    for (const auto& [name, s] : r.thread_cpu_s) threads[name].push_back(s);
  }
  nlohmann::json per_thread = nlohmann::json::object();
  for (const auto& [name, s] : threads) per_thread[name] = Median(s);
  const double bytes = Median(copied) + Median(hashed) + Median(l2);
  const double step = in.step_s_on > 0 ? in.step_s_on : std::numeric_limits<double>::infinity();
  const double rank_gbps = bytes / step / 1e9;
  const double cpu_per_s = std::max(0.0, in.cpu_extra_s) / step;  // cores one rank keeps busy
  const int n = std::max(1, in.node_ranks);
  // The state per rank a node of n ranks could protect every step at this step time, were its
  // bytes and CPU seconds proportional to the state: the host's triad, or its cores, all of them.
  const double state = static_cast<double>(in.state_bytes);
  const double by_memory =
      bytes > 0 && state > 0 ? in.triad_gb_per_s * 1e9 * step / (n * bytes / state) : 0;
  const double by_cores =
      in.cpu_extra_s > 0 && state > 0 ? in.host_cores * step / (n * in.cpu_extra_s / state) : 0;
  return {{"name", "protect-node"},
          {"node_ranks", n},
          {"state_bytes_per_rank", in.state_bytes},
          {"step_s_on", in.step_s_on},
          {"l1_copied_bytes_per_step", Median(copied)},
          {"l1_hashed_bytes_per_step", Median(hashed)},
          {"l2_bytes_per_step", Median(l2)},
          {"host_bytes_per_step", bytes},
          {"host_gb_per_s_per_rank", rank_gbps},
          {"cpu_s_per_step_s", cpu_per_s},
          {"thread_cpu_s_per_step", per_thread},
          {"node_host_gb_per_s", n * rank_gbps},
          {"host_triad_gb_per_s", in.triad_gb_per_s},
          {"node_share_of_triad", in.triad_gb_per_s > 0 ? n * rank_gbps / in.triad_gb_per_s : 0.0},
          {"node_cores", n * cpu_per_s},
          {"host_cores", in.host_cores},
          {"node_state_bytes_per_rank_max_by_memory", by_memory},
          {"node_state_bytes_per_rank_max_by_cores", by_cores}};
}

}  // namespace rtft::bench
