// The gather messages (docs/control-protocol.md, "Gather"): every member of an epoch sends its
// contribution once; the coordinator answers the leader (member 0) with all of them, the leader
// sends back what it decided from them (the result), and every other member receives that result
// once. With `all`, every member receives every contribution instead (O(N^2) bytes: small worlds
// only). Used by the Protector's rollback agreement (docs/protect.md, "Recovery").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/wire/types.h"
#include "rtft/status.h"

namespace rtft::control {

// One member's contribution, and the leader's result, at most (bytes).
constexpr size_t kMaxGatherValueBytes = 64 * 1024;
constexpr size_t kMaxGatherResultBytes = 512 * 1024;

struct GatherRequest {
  std::string key;      // names the gather (str <= kMaxKeyBytes); the same on every member
  uint64_t epoch = 0;   // the epoch it belongs to: it ends (kAborted) when the job moves on
  int32_t members = 0;  // how many contribute: the epoch's world size
  int32_t index = 0;    // this member's logical rank in that epoch
  std::string value;    // its contribution
  bool all = false;     // every member receives every contribution
  int64_t timeout_ms = 0;
};

// What a member receives: the leader (or every member, with `all`) the contributions in member
// order; the others the leader's result.
struct GatherReply {
  std::vector<std::string> values;
  std::optional<std::string> result;
};

nlohmann::json GatherBody(uint64_t req, const GatherRequest& g);
GatherRequest GatherFrom(const nlohmann::json& body);
nlohmann::json GatherResultBody(uint64_t req, const std::string& key, uint64_t epoch,
                                const std::string& value);
nlohmann::json GatherValueBody(uint64_t req, const StatusOr<GatherReply>& reply);
// The same from the parts (the coordinator shares one list of values among many answers):
// `values` when not null, else `result` when set, else nothing (an error).
nlohmann::json GatherValueBody(uint64_t req, const Status& status,
                               const std::vector<std::string>* values,
                               const std::optional<std::string>& result);
// Reads a gather-value or a local-gather-reply body.
StatusOr<GatherReply> GatherReplyFrom(const nlohmann::json& body);
// agent -> runtime (local link): the answer to the runtime's gather `key`.
nlohmann::json LocalGatherReplyBody(const std::string& key, const StatusOr<GatherReply>& reply);

}  // namespace rtft::control
