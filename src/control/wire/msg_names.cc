// The message types' names, for logs and errors (docs/control-protocol.md, "Message types").
#include "control/wire/messages.h"

namespace rtft::control {

const char* MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kHello:
      return "hello";
    case MsgType::kHeartbeat:
      return "heartbeat";
    case MsgType::kFailure:
      return "failure";
    case MsgType::kExit:
      return "exit";
    case MsgType::kKvPut:
      return "kv-put";
    case MsgType::kKvGet:
      return "kv-get";
    case MsgType::kVote:
      return "vote";
    case MsgType::kSync:
      return "sync";
    case MsgType::kGather:
      return "gather";
    case MsgType::kGatherResult:
      return "gather-result";
    case MsgType::kEventDelta:
      return "event-delta";
    case MsgType::kGatherValue:
      return "gather-value";
    case MsgType::kLocalGatherReply:
      return "local-gather-reply";
    case MsgType::kEvent:
      return "event";
    case MsgType::kAck:
      return "ack";
    case MsgType::kKvValue:
      return "kv-value";
    case MsgType::kHeartbeatAck:
      return "heartbeat-ack";
    case MsgType::kCoordinators:
      return "coordinators";
    case MsgType::kRepl:
      return "repl";
    case MsgType::kReplAck:
      return "repl-ack";
    case MsgType::kAttach:
      return "attach";
    case MsgType::kReport:
      return "report";
    case MsgType::kAssign:
      return "assign";
    case MsgType::kLocalEvent:
      return "local-event";
    case MsgType::kLocalKvReply:
      return "local-kv-reply";
    case MsgType::kPause:
      return "pause";
    case MsgType::kLocalPause:
      return "local-pause";
  }
  return "unknown";
}

}  // namespace rtft::control
