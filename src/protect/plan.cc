// The recovery planner (docs/protect.md, "Recovery", "Shrink" and "3D layouts"): the pure
// functions every rank runs on what all published; their wire form is in plan_codec.cc.
#include "protect/plan.h"

#include <algorithm>
#include <map>

namespace rtft::protect {
namespace {

bool Has(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

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

bool CanStartOver(const std::vector<RankState>& all, uint64_t layout_hash) {
  if (all.empty()) return false;
  const int world = static_cast<int>(all.size());
  for (const RankState& r : all) {
    if (r.layout_hash != layout_hash) return false;
    const bool built = r.untouched_world == world && r.l1.empty();
    const bool only_step_0 =
        r.was_world == world && std::find(r.l1.begin(), r.l1.end(), uint64_t{0}) != r.l1.end() &&
        std::all_of(r.l1.begin(), r.l1.end(), [](uint64_t s) { return s == 0; });
    if (!built && !only_step_0) return false;
    // A replica of a later step: some rank got past step 0.
    for (const auto& [owner, step] : r.l2)
      if (step != 0) return false;
  }
  return true;
}

}  // namespace rtft::protect
