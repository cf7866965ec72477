// The bodies of the control-plane messages, built from and read into the domain structs
// (messages.h); readers take bodies the codec already checked against their schema.
#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

std::vector<int32_t> Ints(const json& v) {
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(e.get<int32_t>());
  return out;
}

json MembershipFields(const Membership& m) {
  json roles = json::array();
  for (Role r : m.slot_roles) roles.push_back(static_cast<int>(r));
  json b{{"epoch", m.epoch},   {"ws", m.world_size},   {"r2s", m.rank_to_slot},
         {"spares", m.spares}, {"retired", m.retired}, {"roles", roles}};
  if (!m.devices.empty()) b["devs"] = m.devices;
  return b;
}

json StatusFields(const Status& s) {
  return json{{"code", static_cast<int>(s.code())}, {"msg", s.message().substr(0, kMaxTextBytes)}};
}

}  // namespace

json HelloBody(const AgentInfo& me) {
  json b{{"slot", me.slot}, {"host", me.host.substr(0, kMaxHostBytes)}, {"pid", me.pid}};
  if (!me.coordinator_endpoint.empty()) b["ep"] = me.coordinator_endpoint;
  if (me.gpus > 0) {
    b["gpus"] = me.gpus;
    b["dev"] = me.device;
  }
  return b;
}
json VoteBody(SlotId slot, uint64_t epoch) { return json{{"slot", slot}, {"epoch", epoch}}; }
json CoordinatorsBody(SlotId primary, SlotId standby, const std::string& endpoint) {
  return json{{"primary", primary}, {"standby", standby}, {"sbep", endpoint}};
}
json ReplAckBody(uint64_t seq) { return json{{"seq", seq}}; }
json HeartbeatBody(SlotId slot, uint64_t step, uint64_t seq, bool want_ack,
                   const CallProgress& progress, const StepWork& work,
                   const std::optional<PauseNotice>& paused) {
  json b{{"slot", slot}, {"step", step}, {"seq", seq}};
  if (want_ack) b["ack"] = true;
  // Only once the application has sampled (docs/control-protocol.md, "Heartbeat").
  if (progress.age_ms >= 0) {
    b["calls"] = progress.calls;
    b["inc"] = progress.in_call;
    b["peer"] = progress.peer;
    b["lp"] = progress.long_phase;
    b["age"] = progress.age_ms;
  }
  if (work.steps > 0) {
    b["wus"] = work.us;
    b["wn"] = work.steps;
  }
  if (paused) {
    b["pze"] = paused->epoch;
    b["pz"] = paused->step;
  }
  return b;
}
std::optional<PauseNotice> PausedFrom(const json& b) {
  if (!b.contains("pz")) return std::nullopt;  // the codec checked that both come together
  PauseNotice p;
  p.epoch = b["pze"].get<uint64_t>();
  p.step = b["pz"].get<uint64_t>();
  return p;
}
json PauseBody(const PauseNotice& n) {
  return json{{"epoch", n.epoch}, {"step", n.step}, {"cancel", n.cancel}};
}
PauseNotice PauseFrom(const json& b) {
  PauseNotice n;
  n.epoch = b["epoch"].get<uint64_t>();
  n.step = b["step"].get<uint64_t>();
  n.cancel = b["cancel"].get<bool>();
  return n;
}
StepWork StepWorkFrom(const json& b) {
  StepWork w;
  if (!b.contains("wn")) return w;  // the codec checked that both come together
  w.us = b["wus"].get<uint64_t>();
  w.steps = b["wn"].get<uint32_t>();
  return w;
}
CallProgress CallProgressFrom(const json& b) {
  CallProgress p;
  if (!b.contains("age")) return p;  // the codec checked that all five come together
  p.calls = b["calls"].get<uint64_t>();
  p.in_call = b["inc"].get<bool>();
  p.peer = b["peer"].get<int32_t>();
  p.long_phase = b["lp"].get<bool>();
  p.age_ms = b["age"].get<int64_t>();
  return p;
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
  json b{{"role", static_cast<int>(a.role)},
         {"rank", a.rank},
         {"epoch", a.epoch},
         {"ws", a.world_size}};
  if (a.device >= 0) b["dev"] = a.device;
  return b;
}
json AttachBody(int32_t pid) { return json{{"pid", pid}}; }
json ReportBody(const RuntimeReport& r) {
  json b{{"rt", static_cast<int>(r.type)}};
  switch (r.type) {
    case RuntimeReport::Type::kProgress:
      b["step"] = r.step;
      if (r.work_us >= 0) b["work"] = r.work_us;
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
    case RuntimeReport::Type::kGather:
      b["key"] = r.key;
      b["value"] = BytesValue(r.value);
      b["tmo"] = r.timeout_ms;
      b["epoch"] = r.epoch;
      b["n"] = r.members;
      b["idx"] = r.index;
      if (r.all) b["all"] = true;
      break;
    case RuntimeReport::Type::kGatherResult:
      b["key"] = r.key;
      b["value"] = BytesValue(r.value);
      b["epoch"] = r.epoch;
      break;
    case RuntimeReport::Type::kPaused:
      b["epoch"] = r.epoch;
      b["step"] = r.step;
      break;
    case RuntimeReport::Type::kCorrupt:
      b["step"] = r.step;
      break;
    case RuntimeReport::Type::kSample:
      b["calls"] = r.progress.calls;
      b["inc"] = r.progress.in_call;
      b["peer"] = r.progress.peer;
      b["lp"] = r.progress.long_phase;
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
  if (b.contains("devs")) m.devices = Ints(b["devs"]);  // as long as r2s (the codec checked)
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
  const LogicalRank r = e.assignment.rank;
  if (r >= 0 && static_cast<size_t>(r) < e.membership.devices.size())
    e.assignment.device = e.membership.devices[r];
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
  if (b.contains("dev")) a.device = b["dev"].get<int32_t>();
  return a;
}

RuntimeReport ReportFrom(const json& b) {
  RuntimeReport r;
  r.type = static_cast<RuntimeReport::Type>(b["rt"].get<int>());
  if (b.contains("step")) r.step = b["step"].get<uint64_t>();
  if (b.contains("work")) r.work_us = b["work"].get<int64_t>();
  if (b.contains("detail")) r.detail = b["detail"].get<std::string>();
  if (b.contains("key")) r.key = b["key"].get<std::string>();
  if (b.contains("value")) r.value = BytesFrom(b["value"]);
  if (b.contains("tmo")) r.timeout_ms = b["tmo"].get<int64_t>();
  if (r.type == RuntimeReport::Type::kSample) {
    r.progress.calls = b["calls"].get<uint64_t>();
    r.progress.in_call = b["inc"].get<bool>();
    r.progress.peer = b["peer"].get<int32_t>();
    r.progress.long_phase = b["lp"].get<bool>();
  }
  if (b.contains("epoch")) r.epoch = b["epoch"].get<uint64_t>();
  if (b.contains("n")) r.members = b["n"].get<int32_t>();
  if (b.contains("idx")) r.index = b["idx"].get<int32_t>();
  if (b.contains("all")) r.all = b["all"].get<bool>();
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
