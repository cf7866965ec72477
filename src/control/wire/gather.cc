// The gather messages' bodies (gather.h); readers take bodies the codec already checked.
#include "control/wire/gather.h"

#include "control/wire/messages.h"

namespace rtft::control {

using json = nlohmann::json;

json GatherBody(uint64_t req, const GatherRequest& g) {
  json b{{"req", req},         {"key", g.key},   {"epoch", g.epoch},
         {"n", g.members},     {"idx", g.index}, {"value", BytesValue(g.value)},
         {"tmo", g.timeout_ms}};
  if (g.all) b["all"] = true;
  return b;
}

GatherRequest GatherFrom(const json& b) {
  GatherRequest g;
  g.key = b["key"].get<std::string>();
  g.epoch = b["epoch"].get<uint64_t>();
  g.members = b["n"].get<int32_t>();
  g.index = b["idx"].get<int32_t>();
  g.value = BytesFrom(b["value"]);
  g.all = b.contains("all") && b["all"].get<bool>();
  g.timeout_ms = b["tmo"].get<int64_t>();
  return g;
}

json GatherResultBody(uint64_t req, const std::string& key, uint64_t epoch,
                      const std::string& value) {
  return json{{"req", req}, {"key", key}, {"epoch", epoch}, {"value", BytesValue(value)}};
}

json GatherValueBody(uint64_t req, const Status& s, const std::vector<std::string>* values,
                     const std::optional<std::string>& result) {
  json b{{"req", req},
         {"code", static_cast<int>(s.code())},
         {"msg", s.message().substr(0, kMaxTextBytes)}};
  if (!s.ok()) return b;
  if (values) {
    json list = json::array();
    for (const std::string& v : *values) list.push_back(BytesValue(v));
    b["values"] = std::move(list);
  } else if (result) {
    b["value"] = BytesValue(*result);
  }
  return b;
}

json GatherValueBody(uint64_t req, const StatusOr<GatherReply>& reply) {
  if (!reply.ok()) return GatherValueBody(req, reply.status(), nullptr, std::nullopt);
  return GatherValueBody(req, Status::Ok(), reply->result ? nullptr : &reply->values,
                         reply->result);
}

json LocalGatherReplyBody(const std::string& key, const StatusOr<GatherReply>& reply) {
  json b = GatherValueBody(0, reply);
  b.erase("req");
  b["key"] = key;
  return b;
}

StatusOr<GatherReply> GatherReplyFrom(const json& b) {
  RTFT_RETURN_IF_ERROR(StatusFrom(b));
  GatherReply r;
  if (b.contains("value")) {
    r.result = BytesFrom(b["value"]);
  } else if (b.contains("values")) {
    r.values.reserve(b["values"].size());
    for (const auto& v : b["values"]) r.values.push_back(BytesFrom(v));
  } else {
    return Status::InvalidArgument("a gather answer with neither values nor a result");
  }
  return r;
}

}  // namespace rtft::control
