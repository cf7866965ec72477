#include "protect/plan.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace rtft::protect {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWorld = int64_t{1} << 24;

}  // namespace

std::string EncodeRankState(const RankState& s) {
  json l2 = json::array();
  for (const auto& [owner, step] : s.l2) l2.push_back({owner, step});
  return json{{"v", 1},
              {"rank", s.rank},
              {"was", s.was},
              {"was_world", s.was_world},
              {"hash", s.layout_hash},
              {"l1", s.l1},
              {"l2", l2}}
      .dump();
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
  return a;
}

namespace {

bool Has(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

namespace {

// Whether group `g` (ranks in ring order, hash `hash`) can restore `step`; adds its needy ranks,
// their holders and sources to `p`, or says why not.
bool GroupCan(const std::vector<RankState>& ranks, const std::vector<int>& g, uint64_t hash,
              uint64_t step, bool world_owners, RecoveryPlan* p) {
  const int n = static_cast<int>(g.size());
  std::vector<int> sources;
  for (int r : g)
    if (ranks[r].layout_hash == hash && Has(ranks[r].l1, step)) sources.push_back(r);
  if (sources.empty()) {
    p->why = "no rank of rank " + std::to_string(g[0]) + "'s data-parallel group holds step " +
             std::to_string(step);
    return false;
  }
  size_t next_source = 0;
  for (int i = 0; i < n; ++i) {
    const int r = g[i];
    if (ranks[r].layout_hash == hash && Has(ranks[r].l1, step)) continue;
    // Rank r holds nothing of `step`: its replica is on its right neighbour in the ring.
    const int h = g[(i + 1) % n];
    const std::pair<int, uint64_t> replica(world_owners ? r : i, step);
    const RankState& holder = ranks[h];
    if (h == r || holder.layout_hash != hash ||
        std::find(holder.l2.begin(), holder.l2.end(), replica) == holder.l2.end()) {
      p->why = "rank " + std::to_string(r) + "'s state of step " + std::to_string(step) +
               " is neither in its own snapshot nor replicated on rank " + std::to_string(h);
      return false;
    }
    p->needy.push_back(r);
    p->holder.push_back(h);
    p->source.push_back(sources[next_source++ % sources.size()]);
  }
  return true;
}

// The hash most of a group's members publish (the lowest of a tie).
uint64_t GroupHash(const std::vector<RankState>& ranks, const std::vector<int>& g) {
  std::map<uint64_t, int> votes;
  for (int r : g) ++votes[ranks[r].layout_hash];
  uint64_t best = 0;
  int most = 0;
  for (const auto& [hash, n] : votes)
    if (n > most) best = hash, most = n;
  return best;
}

RecoveryPlan Plan(const std::vector<RankState>& ranks, const std::vector<std::vector<int>>& groups,
                  const std::vector<uint64_t>& hashes, bool world_owners) {
  RecoveryPlan plan;
  // Candidate steps: those some rank's L1 holds, newest first.
  std::vector<uint64_t> candidates;
  for (const RankState& r : ranks)
    for (uint64_t s : r.l1) candidates.push_back(s);
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (uint64_t step : candidates) {
    RecoveryPlan p;
    p.step = step;
    bool possible = true;
    for (size_t k = 0; k < groups.size() && possible; ++k)
      possible = GroupCan(ranks, groups[k], hashes[k], step, world_owners, &p);
    if (possible) {
      for (size_t r = 0; r < ranks.size() && p.replicated_source < 0; ++r)
        if (Has(ranks[r].l1, step)) p.replicated_source = static_cast<int>(r);
      // Needy ranks in rank order: every rank runs the transfers in that one order.
      std::vector<size_t> order(p.needy.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return p.needy[a] < p.needy[b]; });
      RecoveryPlan sorted = p;
      for (size_t i = 0; i < order.size(); ++i) {
        sorted.needy[i] = p.needy[order[i]];
        sorted.holder[i] = p.holder[order[i]];
        sorted.source[i] = p.source[order[i]];
      }
      sorted.ok = true;
      return sorted;
    }
    if (plan.why.empty()) plan.why = p.why;
  }
  if (plan.why.empty()) plan.why = "no rank holds a complete snapshot";
  return plan;
}

}  // namespace

RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks, uint64_t layout_hash) {
  std::vector<int> all(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) all[r] = static_cast<int>(r);
  return Plan(ranks, {all}, {layout_hash}, /*world_owners=*/true);
}

RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks,
                          const std::vector<std::vector<int>>& groups) {
  std::vector<uint64_t> hashes;
  for (const auto& g : groups) {
    for (int r : g)
      if (r < 0 || r >= static_cast<int>(ranks.size())) {
        RecoveryPlan p;
        p.why = "a data-parallel group names rank " + std::to_string(r) + " of " +
                std::to_string(ranks.size());
        return p;
      }
    hashes.push_back(GroupHash(ranks, g));
  }
  return Plan(ranks, groups, hashes, /*world_owners=*/false);
}

RecoveryPlan PlanShrink(std::vector<RankState> old, const std::vector<bool>& survived,
                        uint64_t layout_hash) {
  const int n = static_cast<int>(old.size());
  if (static_cast<int>(survived.size()) != n) {
    RecoveryPlan p;
    p.why = "the survivors do not match the old world";
    return p;
  }
  for (int r = 0; r < n; ++r) {
    if (!survived[r]) {
      old[r] = RankState();  // a lost rank holds nothing
      old[r].rank = r;
    }
  }
  // A survivor restores its own snapshot, never a replica: only lost ranks' replicas count.
  for (RankState& s : old)
    s.l2.erase(std::remove_if(s.l2.begin(), s.l2.end(),
                              [&](const std::pair<int, uint64_t>& h) {
                                return h.first < 0 || h.first >= n || survived[h.first];
                              }),
               s.l2.end());
  RecoveryPlan plan = PlanRecovery(old, layout_hash);
  for (size_t i = 0; plan.ok && i < plan.needy.size(); ++i) {
    if (survived[plan.needy[i]] || !survived[plan.holder[i]]) {
      plan.ok = false;
      plan.why = "rank " + std::to_string(plan.needy[i]) + "'s state is not on a survivor";
    }
  }
  return plan;
}

namespace {

// Whether every survivor of the old world holds `step` in its L1 (its group's layout) and every
// rank that left has it replicated on its holder; says why not in `why`.
bool GridStepCan(const GridShrinkPlan& g, const std::vector<RankState>& old,
                 const std::vector<uint64_t>& hashes, uint64_t step, std::string* why) {
  const int T = g.tensor, D = g.old_data;
  for (size_t r = 0; r < old.size(); ++r) {
    const int t = static_cast<int>(r) % T, d = (static_cast<int>(r) / T) % D;
    const int p = static_cast<int>(r) / (T * D);
    const uint64_t hash = hashes[t + T * p];
    if (g.new_of_old[r] >= 0) {
      if (old[r].layout_hash == hash && Has(old[r].l1, step)) continue;
      *why = "surviving rank " + std::to_string(r) + " does not hold step " + std::to_string(step);
      return false;
    }
    const RankState& h = old[g.holder[r]];
    const std::pair<int, uint64_t> replica(d, step);
    if (h.layout_hash != hash || std::find(h.l2.begin(), h.l2.end(), replica) == h.l2.end()) {
      *why = "rank " + std::to_string(r) + "'s state of step " + std::to_string(step) +
             " is not replicated on rank " + std::to_string(g.holder[r]);
      return false;
    }
  }
  return true;
}

// The replicas that left and the new order; false (with `why`) when the survivors do not fit.
bool GridShape(GridShrinkPlan* g) {
  const int T = g->tensor, P = g->pipeline, D = g->old_data;
  std::vector<int> new_d(D, -1);
  for (int d = 0; d < D; ++d) {
    int alive = 0;
    for (int p = 0; p < P; ++p)
      for (int t = 0; t < T; ++t) alive += g->new_of_old[t + T * (d + D * p)] >= 0;
    if (alive != 0 && alive != T * P) {
      g->why = "replica " + std::to_string(d) + " lost some of its ranks but not all: the " +
               "survivors are no whole data-parallel replicas (run dp-launch with --grid " +
               std::to_string(T) + "x" + std::to_string(P) + ")";
      return false;
    }
    if (alive == 0)
      g->left.push_back(d);
    else
      new_d[d] = g->new_data++;
  }
  if (g->new_data == 0) {
    g->why = "no data-parallel replica is left";
    return false;
  }
  g->holder.assign(g->new_of_old.size(), -1);
  for (int r = 0; r < static_cast<int>(g->new_of_old.size()); ++r) {
    const int t = r % T, d = (r / T) % D, p = r / (T * D);
    if (new_d[d] >= 0) {
      g->holder[r] = r;
      if (g->new_of_old[r] == t + T * (new_d[d] + g->new_data * p)) continue;
      g->why = "rank " + std::to_string(r) + " became rank " + std::to_string(g->new_of_old[r]) +
               ", not the layout's rank (run dp-launch with --grid " + std::to_string(T) + "x" +
               std::to_string(P) + ")";
      return false;
    }
    const int right = (d + 1) % D;
    if (new_d[right] < 0) {
      g->why = "replicas " + std::to_string(d) + " and " + std::to_string(right) +
               " of the data-parallel ring both left: rank " + std::to_string(r) +
               "'s replica is on no survivor";
      return false;
    }
    g->holder[r] = t + T * (right + D * p);
  }
  return true;
}

}  // namespace

GridShrinkPlan PlanGridShrink(int tensor, int pipeline, const std::vector<RankState>& old,
                              const std::vector<int>& new_of_old) {
  GridShrinkPlan g;
  g.tensor = tensor;
  g.pipeline = pipeline;
  g.new_of_old = new_of_old;
  const int64_t n = static_cast<int64_t>(old.size()), unit = int64_t{tensor} * pipeline;
  if (tensor < 1 || pipeline < 1 || n == 0 || n > kMaxWorld || n % unit != 0 ||
      new_of_old.size() != old.size()) {
    g.why = "an old world of " + std::to_string(n) + " ranks is no tensor " +
            std::to_string(tensor) + " x pipeline " + std::to_string(pipeline) + " layout";
    return g;
  }
  g.old_data = static_cast<int>(n / unit);
  if (!GridShape(&g)) return g;
  // Each group's layout hash: the one most of its survivors publish.
  const int T = tensor, D = g.old_data;
  std::vector<uint64_t> hashes(static_cast<size_t>(unit));
  std::vector<uint64_t> candidates;
  for (int p = 0; p < pipeline; ++p)
    for (int t = 0; t < T; ++t) {
      std::vector<int> alive;
      for (int d = 0; d < D; ++d)
        if (new_of_old[t + T * (d + D * p)] >= 0) alive.push_back(t + T * (d + D * p));
      hashes[t + T * p] = GroupHash(old, alive);
      for (int r : alive)
        for (uint64_t s : old[r].l1) candidates.push_back(s);
    }
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::string why;
  for (uint64_t step : candidates) {
    if (GridStepCan(g, old, hashes, step, &why)) {
      g.ok = true;
      g.step = step;
      return g;
    }
    if (g.why.empty()) g.why = why;
  }
  if (g.why.empty()) g.why = "no survivor holds a complete snapshot";
  return g;
}

RecoveryPlan GroupShrinkPart(const GridShrinkPlan& g, int t, int p, std::vector<int>* new_of_old) {
  RecoveryPlan part;
  part.ok = g.ok;
  part.step = g.step;
  part.why = g.why;
  const int T = g.tensor, D = g.old_data;
  new_of_old->assign(D, -1);
  for (int d = 0; d < D; ++d) {
    const int r = t + T * (d + D * p);
    if (g.new_of_old[r] >= 0) {
      (*new_of_old)[d] = (g.new_of_old[r] / T) % g.new_data;
      continue;
    }
    part.needy.push_back(d);
    part.holder.push_back((g.holder[r] / T) % D);
  }
  return part;
}

namespace {

// The old world as the survivors knew it: its size, each old rank's published state, the new
// rank of each old one (-1: lost), and why no plan can use it (a rank that holds no old state).
struct OldWorld {
  int size = 0;
  std::vector<RankState> ranks;
  std::vector<int> new_of_old;
  std::string fresh;
};

OldWorld FindOldWorld(const std::vector<RankState>& all) {
  OldWorld w;
  for (const RankState& r : all) w.size = std::max(w.size, r.was_world);
  w.ranks.resize(w.size);
  w.new_of_old.assign(w.size, -1);
  for (const RankState& r : all) {
    if (r.was_world != w.size || r.was < 0 || w.new_of_old[r.was] >= 0) {
      w.fresh =
          "rank " + std::to_string(r.rank) + " of the shrunk job holds no state of the old one";
      continue;
    }
    w.new_of_old[r.was] = r.rank;
    w.ranks[r.was] = r;
    w.ranks[r.was].rank = r.was;
  }
  return w;
}

RecoveryPlan PlanFor(const OldWorld& w, uint64_t layout_hash) {
  if (!w.fresh.empty()) {
    RecoveryPlan p;
    p.why = w.fresh;
    return p;
  }
  std::vector<bool> survived(w.size);
  for (int q = 0; q < w.size; ++q) survived[q] = w.new_of_old[q] >= 0;
  return PlanShrink(w.ranks, survived, layout_hash);
}

}  // namespace

ShrinkDecision DecideShrink(const std::vector<RankState>& all, int tensor, int pipeline,
                            uint64_t layout_hash) {
  const OldWorld old = FindOldWorld(all);
  ShrinkDecision d;
  d.old_size = old.size;
  d.new_of_old = old.new_of_old;
  d.fresh = old.fresh;
  if (tensor <= 1 && pipeline <= 1) {
    d.plan = PlanFor(old, layout_hash);
  } else if (old.fresh.empty()) {
    d.grid = PlanGridShrink(tensor, pipeline, old.ranks, old.new_of_old);
  } else {
    d.grid.why = old.fresh;
  }
  return d;
}

}  // namespace rtft::protect
