// A job in one process for the control-plane tests: a coordinator on tcp://127.0.0.1 with
// CURVE, and one AgentClient per slot, joined concurrently (Join waits for every slot).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "control/agent/agent_client.h"
#include "control/coordinator/coordinator.h"
#include "control/wire/keys.h"

namespace rtft::control::testing {

using std::chrono::milliseconds;

struct JobConfig {
  int slots = 4;
  int spares = 1;
  int max_restarts = 1;
  SparesExhaustedPolicy policy = SparesExhaustedPolicy::kCheckpointAndExit;
  milliseconds heartbeat_period{20};
  // Long enough that a slot whose heartbeats a loaded machine delays is not declared lost: a
  // test that kills a slot waits for the detection, it never races it. CI runs three tests at
  // once on two cores: heartbeat threads stalled 400 ms, and twice the coordinator heard nothing
  // from a live slot for 1.5 s (the agent sent on time; not explained), which at 1.5 s made a
  // test that lost no slot see one lost.
  milliseconds heartbeat_timeout{5000};
  milliseconds handshake_timeout{5000};
  int max_pending_connections = 0;                // 0: from the descriptor limit
  bool hang_detection = true;                     // the primary's (HangOptions::k 10, or 0)
  std::function<void()> coordinator_fault_point;  // at the top of its event loop's every round
};

class TestJob {
 public:
  explicit TestJob(const JobConfig& cfg) : cfg_(cfg) {
    auto keys = GenerateJobKeys();
    EXPECT_TRUE(keys.ok()) << keys.status();
    keys_ = *keys;
    CoordinatorOptions o;
    o.bind_host = "127.0.0.1";
    o.keys = keys_;
    o.slots = cfg.slots;
    o.spares = cfg.spares;
    o.heartbeat_timeout = cfg.heartbeat_timeout;
    o.join_timeout = milliseconds(10000);
    o.max_restarts_per_slot = cfg.max_restarts;
    o.on_spares_exhausted = cfg.policy;
    o.handshake_timeout = cfg.handshake_timeout;
    o.max_pending_connections = cfg.max_pending_connections;
    if (!cfg.hang_detection) o.hang.k = 0;
    o.fault_point = cfg.coordinator_fault_point;
    auto c = Coordinator::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    agents_.resize(cfg.slots);
    first_.resize(cfg.slots);
  }

  AgentClientOptions ClientOptions(SlotId slot) const {
    AgentClientOptions a;
    a.endpoint = coord_->endpoint();
    a.keys = keys_;
    a.me = {slot, "localhost", 1000 + slot};
    a.heartbeat_period = cfg_.heartbeat_period;
    a.request_timeout = milliseconds(3000);
    return a;
  }

  // Connects every slot and joins them all at once; returns false on any failure.
  bool JoinAll() {
    std::vector<std::future<StatusOr<Assignment>>> joins;
    for (int s = 0; s < cfg_.slots; ++s) {
      auto c = AgentClient::Connect(ClientOptions(s));
      if (!c.ok()) return false;
      agents_[s] = std::move(*c);
      AgentClient* a = agents_[s].get();
      joins.push_back(std::async(std::launch::async, [a] { return a->Join(milliseconds(5000)); }));
    }
    bool ok = true;
    for (int s = 0; s < cfg_.slots; ++s) {
      auto r = joins[s].get();
      EXPECT_TRUE(r.ok()) << "slot " << s << ": " << r.status();
      if (r.ok()) first_[s] = *r;
      ok = ok && r.ok();
    }
    return ok;
  }

  // The next event of `slot`, failing the test when none arrives in time.
  ControlEvent NextEvent(SlotId slot, milliseconds timeout = milliseconds(3000)) {
    auto e = agents_[slot]->WaitEvent(timeout);
    EXPECT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE(e.ok() && e->has_value()) << "slot " << slot << ": no event";
    if (!e.ok() || !e->has_value()) return ControlEvent();
    return **e;
  }
  // Events of `slot` until one with at least `epoch` arrives.
  ControlEvent EventAtLeast(SlotId slot, uint64_t epoch) {
    for (int i = 0; i < 10; ++i) {
      ControlEvent e = NextEvent(slot);
      if (e.membership.epoch >= epoch || e.membership.epoch == 0) return e;
    }
    return ControlEvent();
  }

  Coordinator& coord() { return *coord_; }
  AgentClient& agent(SlotId s) { return *agents_[s]; }
  void Kill(SlotId s) { agents_[s].reset(); }
  const Assignment& first(SlotId s) const { return first_[s]; }
  const JobKeys& keys() const { return keys_; }

 private:
  JobConfig cfg_;
  JobKeys keys_;
  std::unique_ptr<Coordinator> coord_;
  std::vector<std::unique_ptr<AgentClient>> agents_;
  std::vector<Assignment> first_;
};

}  // namespace rtft::control::testing
