// The epoch event as a delta (docs/control-protocol.md, "Event deltas"): what changed since the
// membership the agents hold (ranks given to other slots, slots whose role changed, the spare and
// retired lists), the epoch it applies to and a hash of the result, so that an event costs bytes
// in proportion to the failures, not to the job. An agent that holds another epoch, or whose
// result does not hash right, asks for the whole membership (`sync`).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "control/wire/types.h"
#include "rtft/status.h"

namespace rtft::control {

// FNV-1a over the membership's fields, folded to 63 bits (a MessagePack int the schema accepts).
uint64_t MembershipHash(const Membership& m);

// `event` as a delta against `base` (the membership of the event broadcast before).
nlohmann::json EventDeltaBody(const ControlEvent& event, const Membership& base);
// Applies a validated delta body to `have`: FailedPrecondition when `have` is not its base epoch,
// DataLoss when the result does not hash to the delta's hash (the agent then asks for a sync).
// Fills the assignment of `me` like EventFrom.
StatusOr<ControlEvent> EventFromDelta(const nlohmann::json& body, const Membership& have,
                                      SlotId me);

// agent -> coordinator: "send me the whole membership" (`epoch`: the one this agent holds).
nlohmann::json SyncBody(SlotId slot, uint64_t epoch);

}  // namespace rtft::control
