// The change log of the coordinator's state (docs/control-protocol.md "Replication"): every
// change of the membership table, the slots that joined and the key-value store as one value,
// applied the same way by the primary when it makes the change and by the standby when it
// receives it (kRepl), so the standby's copy is the primary's. Table changes are kept in order
// from the job's start: a new standby replays them, then receives the store's entries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/coordinator/membership_table.h"
#include "control/wire/messages.h"

namespace rtft::control {

struct ReplChange {
  ReplChange() = default;
  explicit ReplChange(ReplOp o, SlotId s = -1) : op(o), slot(s) {}

  ReplOp op = ReplOp::kPing;
  // kJoin, kExit: the slot. kFail: the slot whose request it answers (-1: the coordinator's own
  // finding, a heartbeat scan or the join deadline). kSyncBegin: the primary's slot.
  SlotId slot = -1;
  std::string host, endpoint;         // kJoin (the slot's standby-capable coordinator)
  int32_t device = -1, gpus = 0;      // kJoin: the slot's own device and its node's GPUs
  std::vector<SlotFailure> failures;  // kFail
  int32_t exit_code = 0;              // kExit
  std::string key, value;             // kKv
  // kFail, kExit: the agent's request; a request sent again (after a takeover) is answered
  // without being applied twice.
  std::optional<uint64_t> req;
  int32_t slots = 0;   // kSyncBegin: the job's slot count (the standby checks it)
  uint64_t epoch = 0;  // kSyncEnd: the epoch the copy reached (the standby checks it)
};

// Table changes go into the log a new standby replays; kKv, pings and sync markers do not.
bool InLog(const ReplChange& c);
nlohmann::json ReplBody(uint64_t seq, const ReplChange& c);
// From a body the codec checked against kRepl's schema; InvalidArgument when the op lacks a
// field it needs.
StatusOr<ReplChange> ReplFrom(const nlohmann::json& body);

}  // namespace rtft::control
