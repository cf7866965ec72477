// What the coordinator knows of the job: the membership table, each slot's agent (what its hello
// said, where its connection is), the key-value store and the log of the table's changes. A
// primary changes it and a standby receives the same changes (Apply: the same code for both), so
// the standby's copy is the primary's. Private to src/control/coordinator/; used on the
// coordinator's event loop only (coordinator_impl.h, primary.h, standby.h).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/coordinator/coordinator.h"
#include "control/coordinator/kv_store.h"
#include "control/coordinator/membership_table.h"
#include "control/coordinator/repl_ops.h"
#include "control/net/zmq_util.h"

namespace rtft::control {

// What the coordinator knows of one slot's agent.
struct CoordinatorSlot {
  bool joined = false;  // its hello reached the primary (replicated)
  std::string peer;     // routing id of the agent's connection to this coordinator
  std::string host;
  std::string endpoint;  // its standby-capable coordinator (replicated)
  SteadyClock::time_point last_seen{};
  SteadyClock::time_point last_retired_notice{};
  uint64_t step = 0;
  std::optional<PauseNotice> paused;    // where its application stands paused, as it last said
  std::optional<uint64_t> applied_req;  // its last failure or exit request applied (replicated)
};

class CoordinatorState {
 public:
  explicit CoordinatorState(const CoordinatorOptions& o);

  // A standby's copy starts over (the primary sends a new one): what the primary said goes, the
  // agents' connections to this coordinator stay.
  void Reset(const CoordinatorOptions& o);
  // The change, made here (the primary) or received (the standby). Table changes go into the log
  // a new standby replays.
  Decision Apply(const ReplChange& c);

  // The slot whose agent said hello on `peer`'s connection; -1 when none did.
  SlotId SlotOf(const std::string& peer) const;
  // `peer` is now `slot`'s connection (an older one of the slot no longer is).
  void Connect(SlotId slot, const std::string& peer);

  const MembershipTable& table() const { return table_; }
  std::vector<CoordinatorSlot>& slots() { return slots_; }
  const std::vector<CoordinatorSlot>& slots() const { return slots_; }
  KvStore& kv() { return kv_; }
  const std::vector<ReplChange>& log() const { return log_; }
  bool started() const { return started_; }
  // The newest event decided (a primary releases it to the agents once its change is committed).
  const ControlEvent& latest() const { return latest_; }

 private:
  MembershipTable table_;
  std::vector<CoordinatorSlot> slots_;
  std::unordered_map<std::string, SlotId> by_peer_;
  KvStore kv_;
  std::vector<ReplChange> log_;  // the table's changes since the start
  bool started_ = false;
  ControlEvent latest_;
};

}  // namespace rtft::control
