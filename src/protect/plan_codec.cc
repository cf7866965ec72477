// The recovery plan's wire form (docs/protect.md, "Recovery"): what a rank publishes (its
// RankState) and what the agreement's leader sends back (AgreedPlan), as JSON. The decoders read
// input from the network: every field is checked for type and range before it is used.
#include "protect/plan.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace rtft::protect {
namespace {

using nlohmann::json;

}  // namespace

std::string EncodeRankState(const RankState& s) {
  json l2 = json::array();
  for (const auto& [owner, step] : s.l2) l2.push_back({owner, step});
  json j{{"v", 1},
         {"rank", s.rank},
         {"was", s.was},
         {"was_world", s.was_world},
         {"hash", s.layout_hash},
         {"l1", s.l1},
         {"l2", l2}};
  if (s.ceiling) j["ceiling"] = *s.ceiling;
  if (s.untouched_world > 0) j["untouched"] = s.untouched_world;
  return j.dump();
}

RankState DecodeRankState(const std::string& text, int rank) {
  RankState s;
  s.rank = rank;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("hash") || !j["hash"].is_number_unsigned() ||
      !j.contains("l1") || !j["l1"].is_array() || !j.contains("l2") || !j["l2"].is_array())
    return s;
  s.layout_hash = j["hash"].get<uint64_t>();
  // The world it held state for; anything out of range holds none.
  if (j.contains("was") && j["was"].is_number_integer() && j.contains("was_world") &&
      j["was_world"].is_number_integer()) {
    const int64_t was = j["was"].get<int64_t>(), world = j["was_world"].get<int64_t>();
    if (world > 0 && world <= kMaxWorld && was >= 0 && was < world) {
      s.was = static_cast<int>(was);
      s.was_world = static_cast<int>(world);
    }
  }
  for (const auto& v : j["l1"])
    if (v.is_number_unsigned()) s.l1.push_back(v.get<uint64_t>());
  if (j.contains("ceiling") && j["ceiling"].is_number_unsigned())
    s.ceiling = j["ceiling"].get<uint64_t>();
  // Anything but a world size: the state may have changed.
  if (j.contains("untouched") && j["untouched"].is_number_unsigned() &&
      j["untouched"].get<uint64_t>() >= 1 && j["untouched"].get<uint64_t>() <= kMaxWorld)
    s.untouched_world = static_cast<int>(j["untouched"].get<uint64_t>());
  for (const auto& v : j["l2"])
    if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_unsigned() &&
        v[0].get<int64_t>() >= 0 && v[0].get<int64_t>() < kMaxWorld)
      s.l2.emplace_back(static_cast<int>(v[0].get<int64_t>()), v[1].get<uint64_t>());
  return s;
}

namespace {

json PlanJson(const RecoveryPlan& p) {
  return json{{"ok", p.ok},         {"step", p.step},     {"needy", p.needy},
              {"holder", p.holder}, {"source", p.source}, {"rsource", p.replicated_source},
              {"why", p.why}};
}

Status BadPlan(const std::string& why) {
  return Status::DataLoss("the agreed recovery plan: " + why);
}

// A list of ranks, each in [lo, hi): of length `n` exactly, or (`n` negative) of at most `hi`.
StatusOr<std::vector<int>> Ranks(const json& j, const char* f, int64_t n, int64_t lo, int64_t hi) {
  if (!j.contains(f) || !j[f].is_array()) return BadPlan(std::string("no list '") + f + "'");
  if (n >= 0 ? j[f].size() != static_cast<size_t>(n)
             : j[f].size() > static_cast<size_t>(std::max<int64_t>(hi, 0)))
    return BadPlan(std::string("'") + f + "' of the wrong length");
  std::vector<int> out;
  out.reserve(j[f].size());
  for (const auto& v : j[f]) {
    // An unsigned value past int64's range would wrap into it: refused before it is read.
    const bool in_range = v.is_number_integer() &&
                          !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{kMaxWorld}) &&
                          v.get<int64_t>() >= lo && v.get<int64_t>() < hi;
    if (!in_range) return BadPlan(std::string("'") + f + "' names a rank outside the world");
    out.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return out;
}

// A plan over `world` ranks, every field checked.
StatusOr<RecoveryPlan> PlanFromJson(const json& j, int world) {
  if (!j.is_object()) return BadPlan("not an object");
  if (!j.contains("ok") || !j["ok"].is_boolean()) return BadPlan("no boolean 'ok'");
  if (!j.contains("step") || !j["step"].is_number_unsigned()) return BadPlan("no step");
  if (!j.contains("why") || !j["why"].is_string()) return BadPlan("no reason");
  if (!j.contains("rsource") || !j["rsource"].is_number_integer()) return BadPlan("no source");
  RecoveryPlan p;
  p.ok = j["ok"].get<bool>();
  p.step = j["step"].get<uint64_t>();
  p.why = j["why"].get<std::string>();
  const int64_t rs = j["rsource"].get<int64_t>();
  if (rs < -1 || rs >= world) return BadPlan("source rank out of range");
  p.replicated_source = static_cast<int>(rs);
  RTFT_ASSIGN_OR_RETURN(p.needy, Ranks(j, "needy", -1, 0, world));
  RTFT_ASSIGN_OR_RETURN(p.holder, Ranks(j, "holder", -1, 0, world));
  RTFT_ASSIGN_OR_RETURN(p.source, Ranks(j, "source", -1, 0, world));
  if (p.holder.size() != p.needy.size() || p.source.size() != p.needy.size())
    return BadPlan("lists of different lengths");
  return p;
}

json DecisionJson(const ShrinkDecision& d) {
  const GridShrinkPlan& g = d.grid;
  return json{{"old", d.old_size},
              {"new_of_old", d.new_of_old},
              {"fresh", d.fresh},
              {"plan", PlanJson(d.plan)},
              {"grid",
               {{"ok", g.ok},
                {"step", g.step},
                {"why", g.why},
                {"tensor", g.tensor},
                {"pipeline", g.pipeline},
                {"old_data", g.old_data},
                {"new_data", g.new_data},
                {"left", g.left},
                {"holder", g.holder}}}};
}

StatusOr<ShrinkDecision> DecisionFromJson(const json& j, int world) {
  if (!j.is_object() || !j.contains("old") || !j["old"].is_number_integer() ||
      j["old"].get<int64_t>() < 1 || j["old"].get<int64_t>() > kMaxWorld)
    return BadPlan("a shrink without the old world's size");
  if (!j.contains("fresh") || !j["fresh"].is_string()) return BadPlan("no 'fresh'");
  ShrinkDecision d;
  d.old_size = static_cast<int>(j["old"].get<int64_t>());
  d.fresh = j["fresh"].get<std::string>();
  RTFT_ASSIGN_OR_RETURN(d.new_of_old, Ranks(j, "new_of_old", d.old_size, -1, world));
  if (!j.contains("plan")) return BadPlan("a shrink without its plan");
  RTFT_ASSIGN_OR_RETURN(d.plan, PlanFromJson(j["plan"], d.old_size));
  if (!j.contains("grid") || !j["grid"].is_object()) return BadPlan("a shrink without its grid");
  const json& gj = j["grid"];
  GridShrinkPlan& g = d.grid;
  for (const char* f : {"tensor", "pipeline", "old_data", "new_data"})
    if (!gj.contains(f) || !gj[f].is_number_integer() || gj[f].get<int64_t>() < 0 ||
        gj[f].get<int64_t>() > kMaxWorld)
      return BadPlan(std::string("the grid's '") + f + "'");
  if (!gj.contains("ok") || !gj["ok"].is_boolean() || !gj.contains("step") ||
      !gj["step"].is_number_unsigned() || !gj.contains("why") || !gj["why"].is_string())
    return BadPlan("the grid's outcome");
  g.ok = gj["ok"].get<bool>();
  g.step = gj["step"].get<uint64_t>();
  g.why = gj["why"].get<std::string>();
  g.tensor = static_cast<int>(gj["tensor"].get<int64_t>());
  g.pipeline = static_cast<int>(gj["pipeline"].get<int64_t>());
  g.old_data = static_cast<int>(gj["old_data"].get<int64_t>());
  g.new_data = static_cast<int>(gj["new_data"].get<int64_t>());
  g.new_of_old = d.new_of_old;
  RTFT_ASSIGN_OR_RETURN(g.left, Ranks(gj, "left", -1, 0, std::max(g.old_data, 1)));
  RTFT_ASSIGN_OR_RETURN(g.holder, Ranks(gj, "holder", -1, -1, d.old_size));
  if (g.ok) {
    // What GroupShrinkPart indexes: a whole old grid, a holder for every old rank, and new
    // positions within the new data-parallel degree.
    if (g.tensor < 1 || g.pipeline < 1 || g.new_data < 1 || g.new_data > g.old_data ||
        int64_t{g.tensor} * g.pipeline * g.old_data != d.old_size ||
        g.holder.size() != static_cast<size_t>(d.old_size))
      return BadPlan("a grid shrink that does not fit its old world");
    for (int h : g.holder)
      if (h < 0) return BadPlan("a grid shrink with an old rank held nowhere");
  }
  return d;
}

}  // namespace

std::string EncodeAgreedPlan(const AgreedPlan& a) {
  json j = PlanJson(a.plan);
  j["v"] = 1;
  j["shrink"] = a.shrink;
  if (a.shrink) j["decision"] = DecisionJson(a.shrink_decision);
  if (a.l3_version) j["l3_version"] = *a.l3_version;
  if (a.start_over) j["start_over"] = true;
  return j.dump();
}

StatusOr<AgreedPlan> DecodeAgreedPlan(const std::string& text, int world) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("v") || j["v"] != 1) return BadPlan("not a version 1 plan");
  if (!j.contains("shrink") || !j["shrink"].is_boolean()) return BadPlan("no boolean 'shrink'");
  AgreedPlan a;
  a.shrink = j["shrink"].get<bool>();
  RTFT_ASSIGN_OR_RETURN(a.plan, PlanFromJson(j, world));
  if (a.shrink) {
    if (!j.contains("decision")) return BadPlan("a shrink without its decision");
    RTFT_ASSIGN_OR_RETURN(a.shrink_decision, DecisionFromJson(j["decision"], world));
  }
  if (j.contains("l3_version")) {
    if (!j["l3_version"].is_number_unsigned()) return BadPlan("'l3_version' is not a step");
    a.l3_version = j["l3_version"].get<uint64_t>();
  }
  if (j.contains("start_over")) {
    if (!j["start_over"].is_boolean()) return BadPlan("'start_over' is not a boolean");
    a.start_over = j["start_over"].get<bool>();
    if (a.start_over && (a.plan.ok || a.shrink || a.l3_version))
      return BadPlan("a start at step 0 with a plan, a shrink or an L3 version");
  }
  return a;
}

}  // namespace rtft::protect
