#include "control/wire/messages.h"

#include <limits>

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
FieldSpec List(const char* name, int64_t min, int64_t max) {
  return {name, K::kIntList, true, min, max, static_cast<size_t>(kMaxSlots)};
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
              Int("xcode", kI32Min, kI32Max)};
  if (local) {
    s.push_back(Int("role", 0, static_cast<int64_t>(Role::kRetired)));
    s.push_back(Int("rank", -1, kMaxSlot));
  }
  return s;
}

const Schema* Lookup(uint8_t type) {
  static const Schema hello = {Slot(), Str("host", kMaxHostBytes), Int("pid", 0, kI32Max)};
  static const Schema heartbeat = {Slot(), Int("step", 0, kI64Max), Int("seq", 0, kI64Max),
                                   Bool("ack", false)};
  static const Schema failure = {Req(), Slot(),
                                 Int("kind", 0, static_cast<int64_t>(FailureKind::kRepeated)),
                                 Int("rank", -1, kMaxSlot), Int("detail", kI32Min, kI32Max)};
  static const Schema exit = {Req(), Slot(), Int("xcode", kI32Min, kI32Max)};
  static const Schema kv_put = {Req(), Str("key", kMaxKeyBytes), Bytes("value", kMaxValueBytes)};
  static const Schema kv_get = {Req(), Str("key", kMaxKeyBytes), Int("tmo", 0, kMaxTimeoutMs)};
  static const Schema event = EventSchema(false);
  static const Schema ack = {Req(), Code(), Msg()};
  static const Schema kv_value = {Req(), Code(), Msg(), Bytes("value", kMaxValueBytes, false)};
  static const Schema heartbeat_ack = {Int("epoch", 0, kI64Max)};
  static const Schema attach = {Int("pid", 0, kI32Max)};
  static const Schema report = {Int("rt", 0, static_cast<int64_t>(RuntimeReport::Type::kKvGet)),
                                Int("step", 0, kI64Max, false),
                                Str("detail", kMaxTextBytes, false),
                                Str("key", kMaxKeyBytes, false),
                                Bytes("value", kMaxValueBytes, false),
                                Int("tmo", 0, kMaxTimeoutMs, false)};
  static const Schema assign = {Int("role", 0, static_cast<int64_t>(Role::kRetired)),
                                Int("rank", -1, kMaxSlot), Int("epoch", 0, kI64Max),
                                Int("ws", 0, kMaxSlots)};
  static const Schema local_event = EventSchema(true);
  static const Schema local_kv_reply = {Str("key", kMaxKeyBytes), Code(), Msg(),
                                        Bytes("value", kMaxValueBytes, false)};
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
    case MsgType::kEvent:
      return &event;
    case MsgType::kAck:
      return &ack;
    case MsgType::kKvValue:
      return &kv_value;
    case MsgType::kHeartbeatAck:
      return &heartbeat_ack;
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
  }
  return nullptr;
}

std::vector<int32_t> Ints(const json& v) {
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(e.get<int32_t>());
  return out;
}

json MembershipFields(const Membership& m) {
  json roles = json::array();
  for (Role r : m.slot_roles) roles.push_back(static_cast<int>(r));
  return json{{"epoch", m.epoch},   {"ws", m.world_size},   {"r2s", m.rank_to_slot},
              {"spares", m.spares}, {"retired", m.retired}, {"roles", roles}};
}

json StatusFields(const Status& s) {
  return json{{"code", static_cast<int>(s.code())}, {"msg", s.message().substr(0, kMaxTextBytes)}};
}

}  // namespace

const Schema* SchemaFor(uint8_t type) { return Lookup(type); }

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
    case MsgType::kEvent:
      return "event";
    case MsgType::kAck:
      return "ack";
    case MsgType::kKvValue:
      return "kv-value";
    case MsgType::kHeartbeatAck:
      return "heartbeat-ack";
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
  }
  return "unknown";
}

Status CheckMessageSemantics(MsgType type, const json& body) {
  if (type != MsgType::kEvent && type != MsgType::kLocalEvent) return Status::Ok();
  const size_t slots = body["roles"].size();
  const auto& r2s = body["r2s"];
  if (body["ws"].get<int64_t>() != static_cast<int64_t>(r2s.size()))
    return Status::InvalidArgument("'ws' differs from the length of 'r2s'");
  for (const char* list : {"r2s", "spares", "retired"}) {
    for (const auto& s : body[list]) {
      if (s.get<int64_t>() >= static_cast<int64_t>(slots))
        return Status::InvalidArgument(std::string("'") + list + "' names a slot beyond 'roles'");
    }
  }
  return Status::Ok();
}

json HelloBody(const AgentInfo& me) {
  return json{{"slot", me.slot}, {"host", me.host.substr(0, kMaxHostBytes)}, {"pid", me.pid}};
}
json HeartbeatBody(SlotId slot, uint64_t step, uint64_t seq, bool want_ack) {
  json b{{"slot", slot}, {"step", step}, {"seq", seq}};
  if (want_ack) b["ack"] = true;
  return b;
}
json FailureBody(uint64_t req, SlotId slot, FailureKind kind, LogicalRank rank, int32_t detail) {
  return json{{"req", req},
              {"slot", slot},
              {"kind", static_cast<int>(kind)},
              {"rank", rank},
              {"detail", detail}};
}
json ExitBody(uint64_t req, SlotId slot, int32_t code) {
  return json{{"req", req}, {"slot", slot}, {"xcode", code}};
}
json KvPutBody(uint64_t req, const std::string& key, const std::string& value) {
  return json{{"req", req}, {"key", key}, {"value", BytesValue(value)}};
}
json KvGetBody(uint64_t req, const std::string& key, int64_t timeout_ms) {
  return json{{"req", req}, {"key", key}, {"tmo", timeout_ms}};
}
json AckBody(uint64_t req, const Status& status) {
  json b = StatusFields(status);
  b["req"] = req;
  return b;
}
json KvValueBody(uint64_t req, const StatusOr<std::string>& value) {
  json b = StatusFields(value.status());
  b["req"] = req;
  if (value.ok()) b["value"] = BytesValue(*value);
  return b;
}

json EventBody(const ControlEvent& e) {
  json b = MembershipFields(e.membership);
  b["ev"] = static_cast<int>(e.type);
  b["failed"] = e.failed_ranks;
  b["reason"] = e.reason.substr(0, kMaxTextBytes);
  b["ckpt"] = e.checkpoint_first;
  b["xcode"] = e.exit_code;
  return b;
}
json LocalEventBody(const ControlEvent& e) {
  json b = EventBody(e);
  b["role"] = static_cast<int>(e.assignment.role);
  b["rank"] = e.assignment.rank;
  return b;
}
json AssignBody(const Assignment& a) {
  return json{{"role", static_cast<int>(a.role)},
              {"rank", a.rank},
              {"epoch", a.epoch},
              {"ws", a.world_size}};
}
json AttachBody(int32_t pid) { return json{{"pid", pid}}; }
json ReportBody(const RuntimeReport& r) {
  json b{{"rt", static_cast<int>(r.type)}};
  switch (r.type) {
    case RuntimeReport::Type::kProgress:
      b["step"] = r.step;
      break;
    case RuntimeReport::Type::kDeviceError:
      b["detail"] = r.detail.substr(0, kMaxTextBytes);
      break;
    case RuntimeReport::Type::kDetach:
      break;
    case RuntimeReport::Type::kKvPut:
      b["key"] = r.key;
      b["value"] = BytesValue(r.value);
      break;
    case RuntimeReport::Type::kKvGet:
      b["key"] = r.key;
      b["tmo"] = r.timeout_ms;
      break;
  }
  return b;
}
json LocalKvReplyBody(const std::string& key, const StatusOr<std::string>& value) {
  json b = StatusFields(value.status());
  b["key"] = key;
  if (value.ok()) b["value"] = BytesValue(*value);
  return b;
}

Membership MembershipFrom(const json& b) {
  Membership m;
  m.epoch = b["epoch"].get<uint64_t>();
  m.world_size = b["ws"].get<int32_t>();
  m.rank_to_slot = Ints(b["r2s"]);
  m.spares = Ints(b["spares"]);
  m.retired = Ints(b["retired"]);
  for (const auto& r : b["roles"]) m.slot_roles.push_back(static_cast<Role>(r.get<int>()));
  return m;
}

ControlEvent EventFrom(const json& b, SlotId me) {
  ControlEvent e;
  e.type = static_cast<ControlEvent::Type>(b["ev"].get<int>());
  e.membership = MembershipFrom(b);
  e.failed_ranks = Ints(b["failed"]);
  e.reason = b["reason"].get<std::string>();
  e.checkpoint_first = b["ckpt"].get<bool>();
  e.exit_code = b["xcode"].get<int32_t>();
  e.assignment.role = RoleOfSlot(e.membership, me);
  e.assignment.rank = RankOfSlot(e.membership, me);
  e.assignment.epoch = e.membership.epoch;
  e.assignment.world_size = e.membership.world_size;
  return e;
}

ControlEvent LocalEventFrom(const json& b) {
  ControlEvent e = EventFrom(b, -1);
  e.assignment.role = static_cast<Role>(b["role"].get<int>());
  e.assignment.rank = b["rank"].get<int32_t>();
  return e;
}

Assignment AssignmentFrom(const json& b) {
  Assignment a;
  a.role = static_cast<Role>(b["role"].get<int>());
  a.rank = b["rank"].get<int32_t>();
  a.epoch = b["epoch"].get<uint64_t>();
  a.world_size = b["ws"].get<int32_t>();
  return a;
}

RuntimeReport ReportFrom(const json& b) {
  RuntimeReport r;
  r.type = static_cast<RuntimeReport::Type>(b["rt"].get<int>());
  if (b.contains("step")) r.step = b["step"].get<uint64_t>();
  if (b.contains("detail")) r.detail = b["detail"].get<std::string>();
  if (b.contains("key")) r.key = b["key"].get<std::string>();
  if (b.contains("value")) r.value = BytesFrom(b["value"]);
  if (b.contains("tmo")) r.timeout_ms = b["tmo"].get<int64_t>();
  return r;
}

Status StatusFrom(const json& b) {
  const int code = b["code"].get<int>();
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), b["msg"].get<std::string>());
}

std::string BytesFrom(const json& v) {
  const auto& bin = v.get_binary();
  return std::string(bin.begin(), bin.end());
}

json BytesValue(const std::string& bytes) {
  return json::binary(std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

}  // namespace rtft::control
