#include "sim/detect_sim.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "bench/common/bench_util.h"
#include "control/coordinator/coordinator.h"
#include "control/wire/messages.h"
#include "sim/sim_agents.h"

namespace rtft::bench {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// CPU seconds (user + system) of this process's threads whose name `match` accepts.
template <typename Match>
double ThreadsCpuSeconds(Match match) {
  double ticks = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string name;
    std::getline(std::ifstream(base + "/comm"), name);
    if (!match(name)) continue;
    std::string stat;
    std::getline(std::ifstream(base + "/stat"), stat);
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string skip;
    for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt (fields 3-13)
    double utime = 0, stime = 0;
    fields >> utime >> stime;
    ticks += utime + stime;
  }
  ::closedir(dir);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double CoordinatorCpu() {
  const std::string io = std::to_string(control::kCoordinatorZmqThreadPrefix) + "/ZMQbg/";
  return ThreadsCpuSeconds(
      [&](const std::string& n) { return n == "rtft-coord" || n.rfind(io, 0) == 0; });
}

double Ms(SimAgents::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout) {
  const auto deadline = SimAgents::Clock::now() + timeout;
  while (!pred()) {
    if (SimAgents::Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

StatusOr<json> RunOne(int n, const DetectSimOptions& o) {
  RTFT_ASSIGN_OR_RETURN(control::JobKeys keys, control::GenerateJobKeys());
  control::CoordinatorOptions co;
  co.bind_host = co.advertise_host = "127.0.0.1";
  co.keys = keys;
  co.slots = n;
  co.spares = 1;
  co.heartbeat_timeout = o.heartbeat_timeout;
  co.join_timeout = milliseconds(120000);
  co.on_spares_exhausted = control::SparesExhaustedPolicy::kShrink;
  RTFT_ASSIGN_OR_RETURN(auto coord, control::Coordinator::Start(co));

  const int threads = std::max(1, std::min(o.driver_threads, n));
  std::vector<std::unique_ptr<SimAgents>> drivers;
  for (int t = 0; t < threads; ++t) {
    std::vector<control::SlotId> slots;
    for (int s = t; s < n; s += threads) slots.push_back(s);
    drivers.push_back(
        std::make_unique<SimAgents>(keys, coord->endpoint(), slots, o.heartbeat_period));
  }
  const auto join_start = SimAgents::Clock::now();
  for (auto& d : drivers) d->Start();
  auto joined = [&] {
    int j = 0;
    for (auto& d : drivers) j += d->joined();
    return j;
  };
  if (!WaitFor([&] { return joined() == n; }, milliseconds(120000)))
    return Status::DeadlineExceeded(std::to_string(joined()) + " of " + std::to_string(n) +
                                    " simulated agents joined");
  const double join_s = Ms(SimAgents::Clock::now() - join_start) / 1000;
  std::this_thread::sleep_for(milliseconds(500));

  // Steady state: heartbeats only.
  const double cpu0 = CoordinatorCpu();
  const double thread0 = coord->stats().thread_cpu_seconds;
  const uint64_t hb0 = coord->stats().heartbeats;
  const auto t0 = SimAgents::Clock::now();
  std::this_thread::sleep_for(milliseconds(static_cast<int64_t>(o.window_s * 1000)));
  const double wall = Ms(SimAgents::Clock::now() - t0) / 1000;
  const double cpu = CoordinatorCpu() - cpu0;
  const double thread_cpu = coord->stats().thread_cpu_seconds - thread0;
  const uint64_t beats = coord->stats().heartbeats - hb0;

  // Kill slot 1 (an active rank): detection, then the announcement of epoch 2 to all others.
  const auto killed = SimAgents::Clock::now();
  drivers[1 % threads]->Kill(1);
  if (!WaitFor([&] { return coord->stats().epoch >= 2; }, o.heartbeat_timeout * 5))
    return Status::DeadlineExceeded("the killed agent was not detected");
  const control::CoordinatorStats st = coord->stats();
  SimAgents::Clock::time_point last{};
  auto saw = [&] {
    int count = 0;
    for (auto& d : drivers) {
      SimAgents::Clock::time_point l;
      count += d->SawEpoch(2, &l);
      last = std::max(last, l);
    }
    return count;
  };
  if (!WaitFor([&] { return saw() == n - 1; }, milliseconds(30000)))
    return Status::DeadlineExceeded(std::to_string(saw()) + " of " + std::to_string(n - 1) +
                                    " agents saw the new epoch");
  int bad = 0;
  for (auto& d : drivers) bad += d->bad_events();
  if (bad) return Status::Internal(std::to_string(bad) + " simulated agents saw a wrong epoch");
  const double detect_ms = Ms(st.epoch_declared_at - killed);
  // What went out (the delta), and what the whole membership would have cost.
  control::ControlEvent announced;
  announced.membership = coord->membership();
  auto full_bytes = EncodeMessage(control::MsgType::kEvent, control::EventBody(announced));
  // Driver 0's first agent is slot 0, which is never the one killed.
  const size_t event_bytes = drivers[0]->last_event_bytes();
  json r = {{"bench", "detect"},
            {"mode", "sim"},
            {"agents", n},
            {"driver_threads", threads},
            {"heartbeat_ms", o.heartbeat_period.count()},
            {"heartbeat_timeout_ms", o.heartbeat_timeout.count()},
            {"join_s", join_s},
            {"heartbeats_per_s", beats / wall},
            {"coordinator_cpu_frac", cpu / wall},
            {"coordinator_thread_cpu_frac", thread_cpu / wall},
            {"coordinator_cpu_us_per_heartbeat", beats ? cpu / beats * 1e6 : 0.0},
            {"coordinator_cpu_us_per_agent_s", cpu / wall / n * 1e6},
            {"detect_ms", detect_ms},
            {"detect_over_timeout", detect_ms / static_cast<double>(o.heartbeat_timeout.count())},
            {"announce_queue_ms", Ms(st.epoch_sent_at - st.epoch_declared_at)},
            {"announce_ms", Ms(last - st.epoch_declared_at)},
            {"event_bytes", event_bytes},
            {"full_event_bytes", full_bytes.ok() ? full_bytes->size() : 0},
            {"target_ms", 1.5 * static_cast<double>(o.heartbeat_timeout.count())}};
  r["met"] = detect_ms <= 1.5 * static_cast<double>(o.heartbeat_timeout.count());
  drivers.clear();
  return r;
}

}  // namespace

Status RunDetectSim(const DetectSimOptions& options, JsonLines* out) {
  RaiseFileLimit();
  std::vector<json> results;
  for (uint64_t n : options.agents) {
    Progress("detect --sim: " + std::to_string(n) + " agents");
    RTFT_ASSIGN_OR_RETURN(json r, RunOne(static_cast<int>(n), options));
    out->Emit(r);
    results.push_back(r);
  }
  if (results.size() >= 2) {
    const json& a = results.front();
    const json& b = results.back();
    const double small = a["coordinator_cpu_us_per_heartbeat"].get<double>();
    const double large = b["coordinator_cpu_us_per_heartbeat"].get<double>();
    out->Emit({{"bench", "detect"},
               {"mode", "sim-summary"},
               {"agents_min", a["agents"]},
               {"agents_max", b["agents"]},
               {"cpu_per_heartbeat_ratio_max_over_min", small > 0 ? large / small : 0.0},
               {"detect_ms_max", std::max_element(results.begin(), results.end(),
                                                  [](const json& x, const json& y) {
                                                    return x["detect_ms"] < y["detect_ms"];
                                                  })
                                     ->at("detect_ms")},
               {"all_met", std::all_of(results.begin(), results.end(),
                                       [](const json& x) { return x["met"].get<bool>(); })}});
  }
  return Status::Ok();
}

}  // namespace rtft::bench
