#include "sim/recovery_sim.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>

#include "bench/common/bench_util.h"
#include "control/coordinator/coordinator.h"
#include "sim/recovery_agents.h"

namespace rtft::bench {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using AgentClock = RecoveryAgents::Clock;

constexpr int kSpares = 2;
constexpr control::SlotId kFirstFailed = 1, kSecondFailed = 3;

// Polls every 10 ms: each poll reads every agent's figures under its driver's lock, and the
// figures themselves are the drivers' time stamps, not the moment a poll saw them.
template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout) {
  const auto deadline = AgentClock::now() + timeout;
  while (!pred()) {
    if (AgentClock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

double Seconds(AgentClock::duration d) { return std::chrono::duration<double>(d).count(); }

// The calling thread's CPUs while it lives (the threads it starts inherit them), then its own
// again.
class CpuScope {
 public:
  explicit CpuScope(const cpu_set_t* cpus) {
    if (!cpus) return;
    pinned_ = pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_) == 0 &&
              pthread_setaffinity_np(pthread_self(), sizeof(*cpus), cpus) == 0;
  }
  ~CpuScope() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
  }
  CpuScope(const CpuScope&) = delete;
  CpuScope& operator=(const CpuScope&) = delete;

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
};

// The coordinator's CPUs and the agents' (the rest of this thread's), or why they cannot be.
struct CpuSplit {
  cpu_set_t coordinator, agents;
  int coordinator_count = 0, agent_count = 0;
};

StatusOr<CpuSplit> SplitCpus(const std::vector<int>& coordinator) {
  CpuSplit split;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0)
    return Status::Internal("cannot read this thread's CPUs");
  CPU_ZERO(&split.coordinator);
  for (int c : coordinator) {
    if (!CPU_ISSET(c, &allowed))
      return Status::InvalidArgument("CPU " + std::to_string(c) +
                                     " is not one this process may use");
    CPU_SET(c, &split.coordinator);
  }
  split.agents = allowed;
  for (int c : coordinator) CPU_CLR(c, &split.agents);
  split.coordinator_count = CPU_COUNT(&split.coordinator);
  split.agent_count = CPU_COUNT(&split.agents);
  if (split.agent_count == 0)
    return Status::InvalidArgument("the coordinator's CPUs leave none to the simulated agents");
  return split;
}

struct Run {
  double announce_s = 0, protocol_s = 0;
  double decided_s = -1, handed_s = -1;  // -1: the poll saw the job past epoch 2 already
  double bytes_sent_per_agent = 0, bytes_received_per_agent = 0;
  uint64_t max_sent = 0, max_received = 0, event_bytes = 0;
  int aborted = 0, resyncs = 0, epochs = 0;
};

StatusOr<Run> RunOne(int n, const std::string& which, const RecoverySimOptions& o,
                     const CpuSplit* cpus) {
  RTFT_ASSIGN_OR_RETURN(control::JobKeys keys, control::GenerateJobKeys());
  control::CoordinatorOptions co;
  co.bind_host = co.advertise_host = "127.0.0.1";
  co.keys = keys;
  co.slots = n;
  co.spares = kSpares;
  co.heartbeat_timeout = o.heartbeat_timeout;
  co.join_timeout = milliseconds(300000);
  // Thousands of CURVE handshakes at once on a loaded machine may take longer than the default
  // 5 s; the simulated agents are the only peers.
  co.handshake_timeout = milliseconds(60000);
  co.on_spares_exhausted = control::SparesExhaustedPolicy::kShrink;
  std::unique_ptr<control::Coordinator> coord;
  {
    CpuScope on(cpus ? &cpus->coordinator : nullptr);  // its event loop and ZeroMQ's threads
    RTFT_ASSIGN_OR_RETURN(coord, control::Coordinator::Start(co));
  }
  CpuScope agents_on(cpus ? &cpus->agents : nullptr);  // the drivers and their ZeroMQ threads

  RecoverySimConfig config;
  config.heartbeat_period = o.heartbeat_period;
  config.gloo_rings = o.gloo_rings;
  if (which == "during") config.report_slot = kSecondFailed;
  const int threads = std::max(1, std::min(o.driver_threads, n));
  std::vector<std::unique_ptr<RecoveryAgents>> drivers;
  for (int t = 0; t < threads; ++t) {
    std::vector<control::SlotId> slots;
    for (int s = t; s < n; s += threads) slots.push_back(s);
    drivers.push_back(std::make_unique<RecoveryAgents>(keys, coord->endpoint(), slots, config));
  }
  for (auto& d : drivers) d->Start();
  auto joined = [&] {
    int j = 0;
    for (auto& d : drivers) j += d->joined();
    return j;
  };
  if (!WaitFor([&] { return joined() == n; }, milliseconds(300000)))
    return Status::DeadlineExceeded(std::to_string(joined()) + " of " + std::to_string(n) +
                                    " simulated agents joined");
  // The failure comes in a running job, not in the aftermath of its start.
  auto steady = [&] {
    for (auto& d : drivers)
      if (!d->steady()) return false;
    return true;
  };
  if (!WaitFor(steady, milliseconds(60000)))
    return Status::DeadlineExceeded("the simulated agents' heartbeats did not come back on time");

  const uint64_t final_epoch = which == "one" ? 2 : 3;
  const auto t0 = AgentClock::now();
  drivers[kFirstFailed % threads]->ReportFailure(kFirstFailed);
  if (which == "two") {
    // The scenario itself: a second failure 100 ms after the first.
    std::this_thread::sleep_until(t0 + o.second_failure_after);
    drivers[kSecondFailed % threads]->ReportFailure(kSecondFailed);
  }
  const int world = n - kSpares;
  auto figures = [&](uint64_t epoch) {
    RecoveryAgents::EpochFigures all;
    for (auto& d : drivers) {
      const auto f = d->Figures(epoch);
      all.ranks += f.ranks;
      all.done += f.done;
      all.last_seen = std::max(all.last_seen, f.last_seen);
      all.last_done = std::max(all.last_done, f.last_done);
      all.bytes_sent += f.bytes_sent;
      all.bytes_received += f.bytes_received;
      all.max_sent = std::max(all.max_sent, f.max_sent);
      all.max_received = std::max(all.max_received, f.max_received);
      all.event_bytes = std::max(all.event_bytes, f.event_bytes);
    }
    return all;
  };
  auto errors = [&] {
    int e = 0;
    for (auto& d : drivers) e += d->errors();
    return e;
  };
  // The coordinator's side of the first new epoch: when it decided, and when it had handed the
  // last agent's copy of the event to ZeroMQ (read while the job is at that epoch).
  control::CoordinatorStats first_stats;
  const bool finished = WaitFor(
      [&] {
        if (first_stats.epoch != 2) {
          const control::CoordinatorStats st = coord->stats();
          if (st.epoch == 2) first_stats = st;
        }
        const auto f = figures(final_epoch);
        return errors() > 0 || (f.ranks == world && f.done == world);
      },
      milliseconds(60000));
  if (errors() > 0) {
    for (auto& d : drivers)
      if (d->errors()) return Status::Internal("simulated agent: " + d->first_error());
  }
  const auto f = figures(final_epoch);
  if (!finished)
    return Status::DeadlineExceeded(std::to_string(f.done) + " of " + std::to_string(world) +
                                    " ranks hold the plan of epoch " + std::to_string(final_epoch));
  if (coord->stats().epoch != final_epoch)
    return Status::Internal("the coordinator is at epoch " + std::to_string(coord->stats().epoch) +
                            ", expected " + std::to_string(final_epoch));
  const auto first = figures(2);
  Run r;
  r.announce_s = Seconds(first.last_seen - t0);
  r.protocol_s = Seconds(f.last_done - t0);
  if (first_stats.epoch == 2) {
    r.decided_s = Seconds(first_stats.epoch_declared_at - t0);
    r.handed_s = Seconds(first_stats.epoch_sent_at - t0);
  }
  r.bytes_sent_per_agent = static_cast<double>(f.bytes_sent) / world;
  r.bytes_received_per_agent = static_cast<double>(f.bytes_received) / world;
  r.max_sent = f.max_sent;
  r.max_received = f.max_received;
  r.event_bytes = first.event_bytes;
  r.epochs = static_cast<int>(final_epoch - 1);
  for (auto& d : drivers) {
    r.aborted += d->aborted();
    r.resyncs += d->resyncs();
  }
  drivers.clear();
  return r;
}

}  // namespace

Status RunRecoverySim(const RecoverySimOptions& o, JsonLines* out) {
  RaiseFileLimit();
  std::optional<CpuSplit> split;
  if (!o.coordinator_cpus.empty()) {
    RTFT_ASSIGN_OR_RETURN(split, SplitCpus(o.coordinator_cpus));
    Progress("recovery --sim: the coordinator on " + std::to_string(split->coordinator_count) +
             " CPU(s), the simulated agents on the other " + std::to_string(split->agent_count));
  }
  for (const std::string& which : o.cases) {
    for (uint64_t n : o.agents) {
      std::vector<double> announce, protocol, sent, received, decided, handed;
      Run last;
      int aborted = 0, resyncs = 0;
      for (int i = 0; i < o.repeats; ++i) {
        Progress("recovery --sim: " + std::to_string(n) + " agents, case " + which + ", run " +
                 std::to_string(i + 1) + "/" + std::to_string(o.repeats));
        RTFT_ASSIGN_OR_RETURN(last,
                              RunOne(static_cast<int>(n), which, o, split ? &*split : nullptr));
        announce.push_back(last.announce_s);
        decided.push_back(last.decided_s);
        handed.push_back(last.handed_s);
        protocol.push_back(last.protocol_s);
        sent.push_back(last.bytes_sent_per_agent);
        received.push_back(last.bytes_received_per_agent);
        aborted = std::max(aborted, last.aborted);
        resyncs += last.resyncs;
      }
      json r = {{"bench", "recovery"},
                {"name", "recovery_sim"},
                {"mode", "sim"},
                {"agents", n},
                {"ranks", n - kSpares},
                {"failures", which == "one" ? 1 : 2},
                {"second_failure", which == "one"   ? "none"
                                   : which == "two" ? "100ms_after"
                                                    : "during_gather"},
                {"epochs", last.epochs},
                {"repeats", o.repeats},
                {"heartbeat_ms", o.heartbeat_period.count()},
                {"heartbeat_timeout_ms", o.heartbeat_timeout.count()},
                {"announce_s", Median(announce)},
                {"protocol_s", Median(protocol)},
                {"decided_s", Median(decided)},
                {"handed_s", Median(handed)},
                {"protocol_s_max", *std::max_element(protocol.begin(), protocol.end())},
                {"bytes_sent_per_agent", Median(sent)},
                {"bytes_received_per_agent", Median(received)},
                {"bytes_sent_max", last.max_sent},
                {"bytes_received_max", last.max_received},
                {"event_bytes", last.event_bytes},
                {"aborted_answers", aborted},
                {"resyncs", resyncs},
                {"comm_keys", 1},
                {"gloo_rings", o.gloo_rings},
                {"coordinator_cpus", split ? split->coordinator_count : 0},
                {"agent_cpus", split ? split->agent_count : 0},
                {"target_announce_s", 0.1},
                {"target_protocol_s", 1.0}};
      r["met"] = r["announce_s"].get<double>() <= 0.1 && r["protocol_s"].get<double>() <= 1.0;
      out->Emit(r);
    }
  }
  return Status::Ok();
}

}  // namespace rtft::bench
