// A job in one process with a standby coordinator, for the control-plane tests: the primary (slot
// 0's), a standby-capable coordinator for every other slot (as each dp-launch runs one), and one
// AgentClient per slot that names its slot's coordinator in its hello. Losing a slot here means
// destroying its agent client and its coordinator.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/agent/agent_client.h"
#include "control/coordinator/coordinator.h"
#include "control/wire/keys.h"

namespace rtft::control::testing {

using std::chrono::milliseconds;

struct StandbyJobConfig {
  int slots = 5;
  int spares = 1;
  milliseconds heartbeat_period{20};
  milliseconds heartbeat_timeout{300};
  milliseconds coordinator_timeout{3000};
  std::string partition_file;  // the primary's test hook
  std::function<void()> primary_fault_point;
};

// Polls `pred` every 10 ms until it holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& pred,
                       milliseconds timeout = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

class StandbyJob {
 public:
  explicit StandbyJob(const StandbyJobConfig& cfg) : cfg_(cfg) {
    auto keys = GenerateJobKeys();
    EXPECT_TRUE(keys.ok()) << keys.status();
    keys_ = *keys;
    coords_.resize(cfg.slots);
    agents_.resize(cfg.slots);
    first_.resize(cfg.slots);
    for (int s = 0; s < cfg.slots; ++s) {
      auto c = Coordinator::Start(Options(s));
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) coords_[s] = std::move(*c);
    }
  }

  CoordinatorOptions Options(SlotId slot) const {
    CoordinatorOptions o;
    o.bind_host = "127.0.0.1";
    o.keys = keys_;
    o.slots = cfg_.slots;
    o.spares = cfg_.spares;
    o.heartbeat_timeout = cfg_.heartbeat_timeout;
    o.join_timeout = milliseconds(10000);
    o.max_restarts_per_slot = 1;
    o.self_slot = slot;
    o.standby = slot != 0;
    o.replicate = true;
    if (slot == 0) {
      o.partition_file = cfg_.partition_file;
      o.fault_point = cfg_.primary_fault_point;
    }
    return o;
  }

  AgentClientOptions ClientOptions(SlotId slot) const {
    AgentClientOptions a;
    a.endpoint = coords_[0]->endpoint();
    a.keys = keys_;
    a.me = {slot, "localhost", 1000 + slot, slot == 0 ? "" : coords_[slot]->endpoint()};
    a.heartbeat_period = cfg_.heartbeat_period;
    a.request_timeout = milliseconds(3000);
    a.primary_timeout = cfg_.heartbeat_timeout;
    a.coordinator_timeout = cfg_.coordinator_timeout;
    return a;
  }

  // Connects every slot and joins them all at once; then waits until the primary has a standby
  // in sync and every agent knows it.
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
    return ok && Eventually([&] { return coords_[0]->stats().standby_slot > 0; });
  }

  // The next event of `slot` with an epoch of at least `epoch` (events before it are skipped).
  ControlEvent EventAtLeast(SlotId slot, uint64_t epoch,
                            milliseconds timeout = milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto e = agents_[slot]->WaitEvent(milliseconds(50));
      EXPECT_TRUE(e.ok()) << "slot " << slot << ": " << e.status();
      if (!e.ok()) break;
      if (e->has_value() && (*e)->membership.epoch >= epoch) return **e;
    }
    ADD_FAILURE() << "slot " << slot << ": no event of epoch " << epoch;
    return ControlEvent();
  }

  Coordinator& coord(SlotId s) { return *coords_[s]; }
  AgentClient& agent(SlotId s) { return *agents_[s]; }
  const Assignment& first(SlotId s) const { return first_[s]; }
  // The slot's dp-launch lost: its agent and its coordinator.
  void Lose(SlotId s) {
    agents_[s].reset();
    coords_[s].reset();
  }
  void LoseCoordinator(SlotId s) { coords_[s].reset(); }

 private:
  StandbyJobConfig cfg_;
  JobKeys keys_;
  std::vector<std::unique_ptr<Coordinator>> coords_;
  std::vector<std::unique_ptr<AgentClient>> agents_;
  std::vector<Assignment> first_;
};

}  // namespace rtft::control::testing
