#include "control/coordinator/repl_ops.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

Status Missing(const char* field, ReplOp op) {
  return Status::InvalidArgument("repl op " + std::to_string(static_cast<int>(op)) + " without '" +
                                 field + "'");
}

}  // namespace

bool InLog(const ReplChange& c) {
  return c.op == ReplOp::kJoin || c.op == ReplOp::kStart || c.op == ReplOp::kFail ||
         c.op == ReplOp::kExit;
}

json ReplBody(uint64_t seq, const ReplChange& c) {
  json b{{"seq", seq}, {"op", static_cast<int>(c.op)}};
  switch (c.op) {
    case ReplOp::kJoin:
      b["slot"] = c.slot;
      b["host"] = c.host;
      if (!c.endpoint.empty()) b["ep"] = c.endpoint;
      if (c.gpus > 0) {
        b["dev"] = c.device;
        b["gpus"] = c.gpus;
      }
      break;
    case ReplOp::kFail: {
      json slots = json::array(), kinds = json::array(), details = json::array();
      for (const SlotFailure& f : c.failures) {
        slots.push_back(f.slot);
        kinds.push_back(static_cast<int>(f.kind));
        details.push_back(f.detail);
      }
      b["fslots"] = slots;
      b["kinds"] = kinds;
      b["details"] = details;
      if (c.slot >= 0) b["slot"] = c.slot;
      break;
    }
    case ReplOp::kExit:
      b["slot"] = c.slot;
      b["xcode"] = c.exit_code;
      break;
    case ReplOp::kKv:
      b["key"] = c.key;
      b["value"] = BytesValue(c.value);
      break;
    case ReplOp::kSyncBegin:
      b["slots"] = c.slots;
      b["slot"] = c.slot;
      break;
    case ReplOp::kSyncEnd:
      b["epoch"] = c.epoch;
      break;
    case ReplOp::kStart:
    case ReplOp::kPing:
      break;
  }
  if (c.req) b["req"] = *c.req;
  return b;
}

StatusOr<ReplChange> ReplFrom(const json& b) {
  ReplChange c;
  c.op = static_cast<ReplOp>(b["op"].get<int>());
  if (b.contains("slot")) c.slot = b["slot"].get<SlotId>();
  if (b.contains("req")) c.req = b["req"].get<uint64_t>();
  switch (c.op) {
    case ReplOp::kJoin:
      if (!b.contains("slot")) return Missing("slot", c.op);
      if (!b.contains("host")) return Missing("host", c.op);
      c.host = b["host"].get<std::string>();
      if (b.contains("ep")) c.endpoint = b["ep"].get<std::string>();
      // The codec checked that both come together and that the device is one of the GPUs.
      if (b.contains("gpus")) {
        c.device = b["dev"].get<int32_t>();
        c.gpus = b["gpus"].get<int32_t>();
      }
      break;
    case ReplOp::kFail:
      // The codec checked that the three lists have one length.
      if (!b.contains("fslots")) return Missing("fslots", c.op);
      for (size_t i = 0; i < b["fslots"].size(); ++i)
        c.failures.push_back({b["fslots"][i].get<SlotId>(),
                              static_cast<FailureKind>(b["kinds"][i].get<int>()),
                              b["details"][i].get<int32_t>()});
      break;
    case ReplOp::kExit:
      if (!b.contains("slot")) return Missing("slot", c.op);
      if (!b.contains("xcode")) return Missing("xcode", c.op);
      c.exit_code = b["xcode"].get<int32_t>();
      break;
    case ReplOp::kKv:
      if (!b.contains("key")) return Missing("key", c.op);
      if (!b.contains("value")) return Missing("value", c.op);
      c.key = b["key"].get<std::string>();
      c.value = BytesFrom(b["value"]);
      break;
    case ReplOp::kSyncBegin:
      if (!b.contains("slots")) return Missing("slots", c.op);
      if (!b.contains("slot")) return Missing("slot", c.op);
      c.slots = b["slots"].get<int32_t>();
      break;
    case ReplOp::kSyncEnd:
      if (!b.contains("epoch")) return Missing("epoch", c.op);
      c.epoch = b["epoch"].get<uint64_t>();
      break;
    case ReplOp::kStart:
    case ReplOp::kPing:
      break;
  }
  return c;
}

}  // namespace rtft::control
