// The control-plane messages (docs/control-protocol.md): their types, schemas, and conversions
// between the domain structs (types.h) and message bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "control/wire/codec.h"
#include "control/wire/types.h"

namespace rtft::control {

enum class MsgType : uint8_t {
  // agent -> coordinator
  kHello = 1,
  kHeartbeat = 2,
  kFailure = 3,
  kExit = 4,
  kKvPut = 5,
  kKvGet = 6,
  kVote = 7,  // to the standby: this agent lost the primary
  kSync = 8,  // send me the whole membership (a delta did not apply)
  kGather = 9,
  kGatherResult = 10,  // the gather's leader: what it decided from the contributions
  // coordinator -> agent
  kEvent = 16,
  kAck = 17,
  kKvValue = 18,
  kHeartbeatAck = 19,
  kCoordinators = 20,  // where the primary and the standby are
  kEventDelta = 21,    // an event as what changed since the one before (wire/delta.h)
  kGatherValue = 22,   // a gather's answer (wire/gather.h)
  kPause = 23,         // pause at a step boundary for a planned swap, or go on (PauseNotice)
  // primary -> standby, and its answer
  kRepl = 24,
  kReplAck = 25,
  // runtime -> agent (local link)
  kAttach = 32,
  kReport = 33,
  // agent -> runtime (local link)
  kAssign = 48,
  kLocalEvent = 49,
  kLocalKvReply = 50,
  kLocalGatherReply = 51,
  kLocalPause = 52,  // the coordinator's kPause, forwarded to the application
};
const char* MsgTypeName(MsgType type);

// What one kRepl message asks the standby to do (coordinator/repl_ops.h builds and reads them).
enum class ReplOp : uint8_t {
  kSyncBegin = 0,  // a copy of the whole state follows: start from nothing
  kJoin = 1,       // a slot's agent said hello
  kStart = 2,      // the job started (epoch 1 went out)
  kFail = 3,       // failures seen together
  kExit = 4,       // an application exited for good
  kKv = 5,         // a key-value put
  kSyncEnd = 6,    // the copy is complete
  kPing = 7,       // nothing changed; the primary is alive
};
constexpr int64_t kMaxReplOp = 7;
// nullptr for a type this version does not know.
const Schema* SchemaFor(uint8_t type);
// Checks across fields that a schema cannot express (an event's lists agree with each other).
Status CheckMessageSemantics(MsgType type, const nlohmann::json& body);

// Limits of variable-size fields.
constexpr size_t kMaxHostBytes = 255;
constexpr size_t kMaxTextBytes = 4096;  // reasons, details, error messages
constexpr size_t kMaxKeyBytes = 256;
constexpr size_t kMaxValueBytes = 512 * 1024;
constexpr size_t kMaxEndpointBytes = 300;  // tcp://<host of up to 255 bytes>:<port>

// Requests that expect an answer carry a request id; the answer (kAck, kKvValue) repeats it.
nlohmann::json HelloBody(const AgentInfo& me);
// `want_ack`: the coordinator answers with kHeartbeatAck (agents ask a few times per
// coordinator timeout, to notice a lost coordinator).
// `progress`: the application's last sample (its fields go out only when age_ms >= 0); `work`:
// its own work over the steps since the last heartbeat (goes out only when steps > 0).
// `paused`: where the application stands paused for a planned swap (its epoch and step).
nlohmann::json HeartbeatBody(SlotId slot, uint64_t step, uint64_t seq, bool want_ack = false,
                             const CallProgress& progress = {}, const StepWork& work = {},
                             const std::optional<PauseNotice>& paused = std::nullopt);
nlohmann::json FailureBody(uint64_t req, SlotId slot, FailureKind kind, LogicalRank rank,
                           int32_t detail);
nlohmann::json ExitBody(uint64_t req, SlotId slot, int32_t code);
nlohmann::json KvPutBody(uint64_t req, const std::string& key, const std::string& value);
nlohmann::json KvGetBody(uint64_t req, const std::string& key, int64_t timeout_ms);
nlohmann::json VoteBody(SlotId slot, uint64_t epoch);
// `standby` -1 (and `endpoint` empty) when there is none.
nlohmann::json CoordinatorsBody(SlotId primary, SlotId standby, const std::string& endpoint);
nlohmann::json ReplAckBody(uint64_t seq);
nlohmann::json AckBody(uint64_t req, const Status& status);
nlohmann::json KvValueBody(uint64_t req, const StatusOr<std::string>& value);
// An event as broadcast: the same bytes for every agent; each derives its own assignment.
nlohmann::json EventBody(const ControlEvent& event);
// The same plus the assignment of the receiving slot (local link).
nlohmann::json LocalEventBody(const ControlEvent& event);
nlohmann::json AssignBody(const Assignment& a);
nlohmann::json AttachBody(int32_t pid);
nlohmann::json ReportBody(const RuntimeReport& report);
nlohmann::json LocalKvReplyBody(const std::string& key, const StatusOr<std::string>& value);
// kPause and kLocalPause.
nlohmann::json PauseBody(const PauseNotice& notice);

// Readers of validated bodies (they do not check again).
Membership MembershipFrom(const nlohmann::json& body);
ControlEvent EventFrom(const nlohmann::json& body, SlotId me);  // fills the assignment of `me`
ControlEvent LocalEventFrom(const nlohmann::json& body);
Assignment AssignmentFrom(const nlohmann::json& body);
RuntimeReport ReportFrom(const nlohmann::json& body);
CallProgress CallProgressFrom(const nlohmann::json& heartbeat);  // age_ms -1 when it has none
StepWork StepWorkFrom(const nlohmann::json& heartbeat);          // steps 0 when it has none
PauseNotice PauseFrom(const nlohmann::json& body);               // kPause, kLocalPause
// Where the slot's application stands paused (docs/protect.md, "Stragglers": a planned swap),
// as its heartbeat says; nullopt when it does not.
std::optional<PauseNotice> PausedFrom(const nlohmann::json& heartbeat);
Status StatusFrom(const nlohmann::json& body);  // from "code" and "msg"
std::string BytesFrom(const nlohmann::json& value);
nlohmann::json BytesValue(const std::string& bytes);

}  // namespace rtft::control
