#include "protect/plan.h"

#include <algorithm>

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

bool Has(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks, uint64_t layout_hash) {
  RecoveryPlan plan;
  const int n = static_cast<int>(ranks.size());
  // Candidate steps: those some rank's L1 holds, newest first.
  std::vector<uint64_t> candidates;
  for (const RankState& r : ranks)
    if (r.layout_hash == layout_hash)
      for (uint64_t s : r.l1) candidates.push_back(s);
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (uint64_t step : candidates) {
    RecoveryPlan p;
    p.step = step;
    bool possible = true;
    for (int r = 0; r < n && possible; ++r) {
      const RankState& s = ranks[r];
      if (s.layout_hash == layout_hash && Has(s.l1, step)) {
        if (p.replicated_source < 0) p.replicated_source = r;
        continue;
      }
      // Rank r holds nothing of `step`: its replica is on its right neighbour.
      const int h = (r + 1) % n;
      const RankState& holder = ranks[h];
      const bool held =
          holder.layout_hash == layout_hash &&
          std::find(holder.l2.begin(), holder.l2.end(), std::make_pair(r, step)) != holder.l2.end();
      if (!held || h == r) {
        possible = false;
        p.why = "rank " + std::to_string(r) + "'s state of step " + std::to_string(step) +
                " is neither in its own snapshot nor replicated on rank " + std::to_string(h);
        break;
      }
      p.needy.push_back(r);
      p.holder.push_back(h);
    }
    if (possible && p.replicated_source >= 0) {
      p.ok = true;
      return p;
    }
    if (plan.why.empty())
      plan.why = p.replicated_source < 0 ? "no rank holds step " + std::to_string(step) : p.why;
  }
  if (plan.why.empty()) plan.why = "no rank holds a complete snapshot";
  return plan;
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

}  // namespace rtft::protect
