#include "control/wire/messages.h"

#include <limits>

#include "control/wire/gather.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using K = FieldSpec::Kind;

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxSlot = kMaxSlots - 1;
constexpr int64_t kMaxTimeoutMs = int64_t{366} * 24 * 3600 * 1000;
constexpr int64_t kMaxStatusCode = static_cast<int64_t>(kLastStatusCode);
constexpr int64_t kMaxDevice = kMaxGpusPerNode - 1;

FieldSpec Int(const char* name, int64_t min, int64_t max, bool required = true) {
  return {name, K::kInt, required, min, max, 0};
}
FieldSpec Bool(const char* name, bool required = true) { return {name, K::kBool, required}; }
FieldSpec Str(const char* name, size_t max_len, bool required = true) {
  return {name, K::kString, required, 0, 0, max_len};
}
FieldSpec Bytes(const char* name, size_t max_len, bool required = true) {
  return {name, K::kBytes, required, 0, 0, max_len};
}
FieldSpec List(const char* name, int64_t min, int64_t max, bool required = true) {
  return {name, K::kIntList, required, min, max, static_cast<size_t>(kMaxSlots)};
}

FieldSpec BytesList(const char* name, size_t max_each, bool required = true) {
  return {name,
          K::kBytesList,
          required,
          0,
          static_cast<int64_t>(max_each),
          static_cast<size_t>(kMaxSlots)};
}

FieldSpec Req() { return Int("req", 0, kI64Max); }
FieldSpec Slot() { return Int("slot", 0, kMaxSlot); }
FieldSpec Code() { return Int("code", 0, kMaxStatusCode); }
FieldSpec Msg() { return Str("msg", kMaxTextBytes); }

Schema EventSchema(bool local) {
  Schema s = {Int("ev", 0, 1),
              Int("epoch", 0, kI64Max),
              Int("ws", 0, kMaxSlots),
              List("r2s", -1, kMaxSlot),
              List("spares", 0, kMaxSlot),
              List("retired", 0, kMaxSlot),
              List("roles", 0, static_cast<int64_t>(Role::kCoordinator)),
              List("failed", -1, kMaxSlot),
              Str("reason", kMaxTextBytes),
              Bool("ckpt"),
              Int("xcode", kI32Min, kI32Max),
              List("devs", -1, kMaxDevice, false)};
  if (local) {
    s.push_back(Int("role", 0, static_cast<int64_t>(Role::kRetired)));
    s.push_back(Int("rank", -1, kMaxSlot));
  }
  return s;
}

// What changed since the event before (wire/delta.h).
Schema EventDeltaSchema() {
  return {Int("ev", 0, 1), Int("epoch", 0, kI64Max), Int("base", 0, kI64Max),
          Int("hash", 0, kI64Max), Int("ws", 0, kMaxSlots), Int("nslots", 0, kMaxSlots),
          List("rpos", 0, kMaxSlot), List("rslot", -1, kMaxSlot), List("spos", 0, kMaxSlot),
          List("srole", 0, static_cast<int64_t>(Role::kCoordinator)), List("spares", 0, kMaxSlot),
          List("retired", 0, kMaxSlot), List("failed", -1, kMaxSlot), Str("reason", kMaxTextBytes),
          Bool("ckpt"), Int("xcode", kI32Min, kI32Max),
          // The ranks' devices (docs/launcher.md, "GPUs"): the list's length (0 or 'ws') and
          // the ranks whose device changed; absent when no rank has one, before or after.
          Int("ndevs", 0, kMaxSlots, false), List("dpos", 0, kMaxSlot, false),
          List("dval", -1, kMaxDevice, false)};
}

// A change the primary sends its standby (coordinator/repl_ops.h says which fields each op uses).
Schema ReplSchema() {
  return {Int("seq", 0, kI64Max),
          Int("op", 0, kMaxReplOp),
          Int("slot", 0, kMaxSlot, false),
          Str("host", kMaxHostBytes, false),
          Str("ep", kMaxEndpointBytes, false),
          List("fslots", 0, kMaxSlot, false),
          List("kinds", 0, static_cast<int64_t>(FailureKind::kCorrupt), false),
          List("details", kI32Min, kI32Max, false),
          Int("xcode", kI32Min, kI32Max, false),
          Str("key", kMaxKeyBytes, false),
          Bytes("value", kMaxValueBytes, false),
          Int("req", 0, kI64Max, false),
          Int("slots", 1, kMaxSlots, false),
          Int("epoch", 0, kI64Max, false),
          Int("dev", -1, kMaxDevice, false),
          Int("gpus", 0, kMaxGpusPerNode, false)};
}

// The tables are never destroyed: rt-ft's threads may still send while the process exits (a C
// program returning from main without rtft_*_destroy), after static destructors have run.
const Schema* Lookup(uint8_t type) {
  static const Schema& hello = *new Schema{Slot(),
                                           Str("host", kMaxHostBytes),
                                           Int("pid", 0, kI32Max),
                                           Str("ep", kMaxEndpointBytes, false),
                                           Int("dev", -1, kMaxDevice, false),
                                           Int("gpus", 0, kMaxGpusPerNode, false)};
  // The application's progress sample comes as a whole or not at all (CheckMessageSemantics).
  static const Schema& heartbeat = *new Schema{Slot(),
                                               Int("step", 0, kI64Max),
                                               Int("seq", 0, kI64Max),
                                               Bool("ack", false),
                                               Int("calls", 0, kI64Max, false),
                                               Bool("inc", false),
                                               Int("peer", -1, kMaxSlot, false),
                                               Bool("lp", false),
                                               Int("age", 0, kI64Max, false),
                                               Int("wus", 0, kI64Max, false),
                                               Int("wn", 1, kI32Max, false),
                                               Int("pze", 0, kI64Max, false),
                                               Int("pz", 0, kI64Max, false)};
  static const Schema& failure =
      *new Schema{Req(), Slot(), Int("kind", 0, static_cast<int64_t>(FailureKind::kCorrupt)),
                  Int("rank", -1, kMaxSlot), Int("detail", kI32Min, kI32Max)};
  static const Schema& exit = *new Schema{Req(), Slot(), Int("xcode", kI32Min, kI32Max)};
  static const Schema& kv_put =
      *new Schema{Req(), Str("key", kMaxKeyBytes), Bytes("value", kMaxValueBytes)};
  static const Schema& kv_get =
      *new Schema{Req(), Str("key", kMaxKeyBytes), Int("tmo", 0, kMaxTimeoutMs)};
  static const Schema& vote = *new Schema{Slot(), Int("epoch", 0, kI64Max)};
  static const Schema& sync = *new Schema{Slot(), Int("epoch", 0, kI64Max)};
  static const Schema& gather = *new Schema{Req(),
                                            Str("key", kMaxKeyBytes),
                                            Int("epoch", 0, kI64Max),
                                            Int("n", 1, kMaxSlots),
                                            Int("idx", 0, kMaxSlot),
                                            Bytes("value", kMaxGatherValueBytes),
                                            Int("tmo", 0, kMaxTimeoutMs),
                                            Bool("all", false)};
  static const Schema& gather_result =
      *new Schema{Req(), Str("key", kMaxKeyBytes), Int("epoch", 0, kI64Max),
                  Bytes("value", kMaxGatherResultBytes)};
  static const Schema& event_delta = *new Schema(EventDeltaSchema());
  static const Schema& gather_value =
      *new Schema{Req(), Code(), Msg(), BytesList("values", kMaxGatherValueBytes, false),
                  Bytes("value", kMaxGatherResultBytes, false)};
  static const Schema& local_gather_reply = *new Schema{
      Str("key", kMaxKeyBytes), Code(), Msg(), BytesList("values", kMaxGatherValueBytes, false),
      Bytes("value", kMaxGatherResultBytes, false)};
  static const Schema& coordinators = *new Schema{
      Int("primary", -1, kMaxSlot), Int("standby", -1, kMaxSlot), Str("sbep", kMaxEndpointBytes)};
  static const Schema& repl = *new Schema(ReplSchema());
  static const Schema& repl_ack = *new Schema{Int("seq", 0, kI64Max)};
  static const Schema& event = *new Schema(EventSchema(false));
  static const Schema& ack = *new Schema{Req(), Code(), Msg()};
  static const Schema& kv_value =
      *new Schema{Req(), Code(), Msg(), Bytes("value", kMaxValueBytes, false)};
  static const Schema& heartbeat_ack = *new Schema{Int("epoch", 0, kI64Max)};
  static const Schema& attach = *new Schema{Int("pid", 0, kI32Max)};
  static const Schema& pause =
      *new Schema{Int("epoch", 0, kI64Max), Int("step", 0, kI64Max), Bool("cancel")};
  static const Schema& report =
      *new Schema{Int("rt", 0, static_cast<int64_t>(RuntimeReport::Type::kCorrupt)),
                  Int("step", 0, kI64Max, false),
                  Int("work", 0, kI64Max, false),
                  Str("detail", kMaxTextBytes, false),
                  Str("key", kMaxKeyBytes, false),
                  Bytes("value", kMaxValueBytes, false),
                  Int("tmo", 0, kMaxTimeoutMs, false),
                  Int("epoch", 0, kI64Max, false),
                  Int("n", 1, kMaxSlots, false),
                  Int("idx", 0, kMaxSlot, false),
                  Bool("all", false),
                  Int("calls", 0, kI64Max, false),
                  Bool("inc", false),
                  Int("peer", -1, kMaxSlot, false),
                  Bool("lp", false)};
  static const Schema& assign = *new Schema{
      Int("role", 0, static_cast<int64_t>(Role::kRetired)), Int("rank", -1, kMaxSlot),
      Int("epoch", 0, kI64Max), Int("ws", 0, kMaxSlots), Int("dev", -1, kMaxDevice, false)};
  static const Schema& local_event = *new Schema(EventSchema(true));
  static const Schema& local_kv_reply =
      *new Schema{Str("key", kMaxKeyBytes), Code(), Msg(), Bytes("value", kMaxValueBytes, false)};
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello:
      return &hello;
    case MsgType::kHeartbeat:
      return &heartbeat;
    case MsgType::kFailure:
      return &failure;
    case MsgType::kExit:
      return &exit;
    case MsgType::kKvPut:
      return &kv_put;
    case MsgType::kKvGet:
      return &kv_get;
    case MsgType::kVote:
      return &vote;
    case MsgType::kSync:
      return &sync;
    case MsgType::kGather:
      return &gather;
    case MsgType::kGatherResult:
      return &gather_result;
    case MsgType::kEventDelta:
      return &event_delta;
    case MsgType::kGatherValue:
      return &gather_value;
    case MsgType::kLocalGatherReply:
      return &local_gather_reply;
    case MsgType::kEvent:
      return &event;
    case MsgType::kAck:
      return &ack;
    case MsgType::kKvValue:
      return &kv_value;
    case MsgType::kHeartbeatAck:
      return &heartbeat_ack;
    case MsgType::kCoordinators:
      return &coordinators;
    case MsgType::kRepl:
      return &repl;
    case MsgType::kReplAck:
      return &repl_ack;
    case MsgType::kAttach:
      return &attach;
    case MsgType::kReport:
      return &report;
    case MsgType::kAssign:
      return &assign;
    case MsgType::kLocalEvent:
      return &local_event;
    case MsgType::kLocalKvReply:
      return &local_kv_reply;
    case MsgType::kPause:
    case MsgType::kLocalPause:
      return &pause;
  }
  return nullptr;
}

}  // namespace

const Schema* SchemaFor(uint8_t type) { return Lookup(type); }

namespace {

// A slot's device and its node's GPUs come together, the device one of those GPUs.
Status CheckDevice(const json& body) {
  if (body.contains("dev") != body.contains("gpus"))
    return Status::InvalidArgument("'dev' and 'gpus' come together");
  if (!body.contains("dev")) return Status::Ok();
  const int64_t dev = body["dev"].get<int64_t>(), gpus = body["gpus"].get<int64_t>();
  if (dev >= gpus || (gpus > 0 && dev < 0))
    return Status::InvalidArgument("'dev' " + std::to_string(dev) + " is not one of 'gpus' " +
                                   std::to_string(gpus));
  return Status::Ok();
}

// Two lists of one length, the first's elements below `bound`.
Status CheckPairs(const json& body, const char* pos, const char* val, int64_t bound) {
  if (body[pos].size() != body[val].size())
    return Status::InvalidArgument(std::string("'") + pos + "' and '" + val + "' differ in length");
  for (const auto& p : body[pos])
    if (p.get<int64_t>() >= bound)
      return Status::InvalidArgument(std::string("'") + pos + "' names a position beyond its list");
  return Status::Ok();
}

Status CheckDeltaSemantics(const json& body) {
  const int64_t ws = body["ws"].get<int64_t>(), slots = body["nslots"].get<int64_t>();
  RTFT_RETURN_IF_ERROR(CheckPairs(body, "rpos", "rslot", ws));
  RTFT_RETURN_IF_ERROR(CheckPairs(body, "spos", "srole", slots));
  for (const char* list : {"rslot", "spares", "retired"}) {
    for (const auto& s : body[list]) {
      if (s.get<int64_t>() >= slots)
        return Status::InvalidArgument(std::string("'") + list + "' names a slot beyond 'nslots'");
    }
  }
  const int present =
      int(body.contains("ndevs")) + int(body.contains("dpos")) + int(body.contains("dval"));
  if (present == 0) return Status::Ok();
  if (present != 3) return Status::InvalidArgument("'ndevs', 'dpos' and 'dval' come together");
  const int64_t ndevs = body["ndevs"].get<int64_t>();
  if (ndevs != 0 && ndevs != ws) return Status::InvalidArgument("'ndevs' is neither 0 nor 'ws'");
  return CheckPairs(body, "dpos", "dval", ndevs);
}

}  // namespace

namespace {

// A progress sample's fields all together or none (`heartbeat`: it carries the sample's age,
// and its step work's two fields come together too).
Status CheckProgress(const json& body, bool heartbeat) {
  int present = 0;
  for (const char* f : {"calls", "inc", "peer", "lp"}) present += body.contains(f) ? 1 : 0;
  if (heartbeat) present += body.contains("age") ? 1 : 0;
  const int all = heartbeat ? 5 : 4;
  if (present != 0 && present != all)
    return Status::InvalidArgument("a progress sample's fields come all together or not at all");
  if (heartbeat && body.contains("wus") != body.contains("wn"))
    return Status::InvalidArgument("a heartbeat's work ('wus') comes with its steps ('wn')");
  if (heartbeat && body.contains("pze") != body.contains("pz"))
    return Status::InvalidArgument("a heartbeat's pause comes with its epoch and step");
  return Status::Ok();
}

}  // namespace

Status CheckMessageSemantics(MsgType type, const json& body) {
  if (type == MsgType::kHello) return CheckDevice(body);
  if (type == MsgType::kHeartbeat) return CheckProgress(body, true);
  if (type == MsgType::kReport) {
    const bool sample =
        body["rt"].get<int64_t>() == static_cast<int64_t>(RuntimeReport::Type::kSample);
    RTFT_RETURN_IF_ERROR(CheckProgress(body, false));
    if (sample && !body.contains("calls"))
      return Status::InvalidArgument("a sample report without its sample");
    if (body["rt"].get<int64_t>() == static_cast<int64_t>(RuntimeReport::Type::kPaused) &&
        !(body.contains("epoch") && body.contains("step")))
      return Status::InvalidArgument("a paused report without its epoch and step");
    return Status::Ok();
  }
  if (type == MsgType::kEventDelta) return CheckDeltaSemantics(body);
  if (type == MsgType::kGather && body["idx"].get<int64_t>() >= body["n"].get<int64_t>())
    return Status::InvalidArgument("'idx' is not below 'n'");
  if ((type == MsgType::kGatherValue || type == MsgType::kLocalGatherReply) &&
      body.contains("values") && body.contains("value"))
    return Status::InvalidArgument("'values' and 'value' together");
  if (type == MsgType::kRepl) {
    RTFT_RETURN_IF_ERROR(CheckDevice(body));
    // A failure's three lists describe the same slots.
    const bool any = body.contains("fslots") || body.contains("kinds") || body.contains("details");
    if (!any) return Status::Ok();
    if (!body.contains("fslots") || !body.contains("kinds") || !body.contains("details") ||
        body["fslots"].size() != body["kinds"].size() ||
        body["fslots"].size() != body["details"].size())
      return Status::InvalidArgument("'fslots', 'kinds' and 'details' differ in length");
    return Status::Ok();
  }
  if (type != MsgType::kEvent && type != MsgType::kLocalEvent) return Status::Ok();
  const size_t slots = body["roles"].size();
  const auto& r2s = body["r2s"];
  if (body["ws"].get<int64_t>() != static_cast<int64_t>(r2s.size()))
    return Status::InvalidArgument("'ws' differs from the length of 'r2s'");
  if (body.contains("devs") && body["devs"].size() != r2s.size())
    return Status::InvalidArgument("'devs' differs in length from 'r2s'");
  for (const char* list : {"r2s", "spares", "retired"}) {
    for (const auto& s : body[list]) {
      if (s.get<int64_t>() >= static_cast<int64_t>(slots))
        return Status::InvalidArgument(std::string("'") + list + "' names a slot beyond 'roles'");
    }
  }
  return Status::Ok();
}

}  // namespace rtft::control
