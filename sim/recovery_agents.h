// Simulated agents for `rtft-bench recovery --sim` (docs/benchmarks.md): like detect --sim's
// (sim_agents.h), many CURVE DEALER sockets on one driver thread, each speaking the real
// protocol to the real coordinator; at each epoch change every rank of the new epoch runs the
// recovery protocol as the Protector does (docs/protect.md, "Recovery"): it applies the event's
// delta, sends its state (protect/plan.h's RankState) to the epoch's gather once, rank 0 plans
// with the Protector's planner and sends the plan back through the gather, and every rank then
// fetches the next epoch's communicator keys (one per communicator) from the KV store.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "control/wire/keys.h"
#include "control/wire/types.h"

namespace rtft::bench {

struct RecoverySimConfig {
  std::chrono::milliseconds heartbeat_period{100};
  // The next epoch's communicators, made after the plan as the Protector makes them
  // (src/protect/recover.cc): `comm_keys` that meet through one key put by rank 0 (NCCL's
  // unique id: the training communicator), then, one after the other, `gloo_rings` Gloo
  // communicators whose ranks meet their ring neighbours through a record per pair (the L2
  // replication's RTFT_PROTECT_L2_STREAMS; docs/comm.md, "Which pairs connect").
  int comm_keys = 1;
  int gloo_rings = 2;
  uint64_t step = 100;       // the newest complete L1 step of every survivor
  int32_t report_slot = -1;  // reports a device error instead of its contribution (epoch 2)
};

class RecoveryAgents {
 public:
  using Clock = std::chrono::steady_clock;
  RecoveryAgents(const control::JobKeys& keys, const std::string& endpoint,
                 std::vector<control::SlotId> slots, const RecoverySimConfig& config);
  ~RecoveryAgents();

  void Start();
  // The slot's agent reports a device error (a permanent failure: its rank goes to a spare).
  void ReportFailure(control::SlotId slot);
  int joined() const { return joined_; }
  // Every agent joined, and none of their heartbeats went out late for two periods: the job runs
  // as it would between failures (after the join, each agent decoding the whole membership
  // keeps the driver busy for seconds).
  bool steady() const;

  // Figures of one epoch, over the agents of this driver that hold a rank in it.
  struct EpochFigures {
    int ranks = 0;  // agents that hold a rank in the epoch and saw it
    int done = 0;   // of those, holding the plan and every communicator key
    int bad = 0;    // a plan that was not ok, or not the expected step
    Clock::time_point last_seen{}, last_done{};
    uint64_t bytes_sent = 0, bytes_received = 0;  // by those agents, for this epoch
    uint64_t max_sent = 0, max_received = 0;      // by one agent
    uint64_t event_bytes = 0;                     // the event's frame
  };
  EpochFigures Figures(uint64_t epoch) const;
  int aborted() const { return aborted_; }  // gather answers kAborted
  int errors() const { return errors_; }    // any other error answer, or a bad message
  int resyncs() const { return resyncs_; }  // deltas that did not apply
  std::string first_error() const;

 private:
  struct Ask {
    uint64_t epoch;
    int kind;  // 0 gather, 1 result, 2 kv-put, 3 kv-get
  };
  struct PerEpoch {
    Clock::time_point seen{}, done{};
    bool is_done = false;
    int rank = -1;
    int waiting = 0;  // answers still due (leader: acks; others: kv values)
    int rings = 0;    // Gloo communicators whose records it has put
    uint64_t sent = 0, received = 0, event_bytes = 0;
  };
  struct Agent {
    control::SlotId slot;
    zmq::socket_t socket;
    Clock::time_point next_beat;
    uint64_t seq = 0, next_req = 1;
    bool joined = false, dead = false;
    int held_rank = -1;  // the rank whose state it holds (after a recovery completed)
    uint64_t epoch = 0;  // the newest epoch it heard of
    std::map<uint64_t, Ask> asks;
    std::map<uint64_t, PerEpoch> epochs;
  };
  // A message taken from an agent's socket, stamped when it was taken.
  struct Arrival {
    Agent* agent;
    zmq::message_t message;
    Clock::time_point at;
  };
  void Run();
  void Drain(Agent& a, std::vector<Arrival>* inbox);  // every message waiting on its socket
  void Handle(std::vector<Arrival>* inbox);           // in arrival order, under mu_
  void Beat(Agent& a, Clock::time_point now);
  void OnMessage(Agent& a, const zmq::message_t& m, Clock::time_point now);
  void OnEpoch(Agent& a, uint64_t epoch, size_t bytes, Clock::time_point now);
  void OnGatherValue(Agent& a, const Ask& ask, const nlohmann::json& body, Clock::time_point now);
  // The next Gloo communicator's records (two puts, two gets), or Done after the last.
  void NextRing(Agent& a, uint64_t epoch, Clock::time_point now);
  void Done(Agent& a, uint64_t epoch, Clock::time_point now);
  void Send(Agent& a, uint64_t epoch, uint8_t type, const nlohmann::json& body);
  uint64_t Request(Agent& a, uint64_t epoch, int kind);
  void Error(const std::string& why);

  zmq::context_t ctx_;
  RecoverySimConfig config_;
  std::vector<Agent> agents_;
  // This driver's copy of the membership (one for all its agents: each decodes its own event,
  // the first to see an epoch applies it), and its slot -> rank index.
  control::Membership membership_;
  std::vector<int> rank_of_slot_;
  uint64_t membership_hash_ = 0;
  std::atomic<int> joined_{0}, aborted_{0}, errors_{0}, resyncs_{0};
  std::atomic<int> report_{-1};
  std::atomic<Clock::rep> late_at_{0};  // when a heartbeat last went out late
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // agents_[i].epochs, dead, first_error_
  std::string first_error_;
  std::thread thread_;
};

}  // namespace rtft::bench
