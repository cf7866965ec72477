// Recovery plans on tensor x pipeline x data layouts (src/protect/plan.cc, grid.cc), on paper up
// to 64 x 16 x 128 ranks: the ring of replicas runs inside each data-parallel group, a lost
// (t, p, d) is fed its shards by (t, p, d + 1) and its replicated tensors by a live rank of its
// own (t, p), several lost ranks of one group spread over its sources, and the step is one that
// every group can restore.
#include <gtest/gtest.h>

#include <set>

#include "protect/grid.h"
#include "protect/plan.h"

namespace rtft::protect {
namespace {

// Every rank holds steps 8 and 9 in L1 and its left neighbour's replicas of both (owners are
// positions in the data-parallel ring).
std::vector<RankState> Healthy(const GridMap& g) {
  std::vector<RankState> s(g.world());
  for (int r = 0; r < g.world(); ++r) {
    const GridPlace& at = g.of(r);
    s[r].rank = r;
    s[r].layout_hash = 1000 + at.t + 100 * at.p;  // each partition describes its own tensors
    s[r].l1 = {9, 8};
    const int left = (at.d + at.data - 1) % at.data;
    s[r].l2 = {{left, 9}, {left, 8}};
  }
  return s;
}

void Lose(std::vector<RankState>* s, int rank) {
  (*s)[rank].l1.clear();
  (*s)[rank].l2.clear();
}

TEST(GridTest, MegatronsOrderAndAnExplicitMap) {
  auto g = GridMap::Make({2, 2, {}}, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->data(), 2);
  // rank = t + T * (d + D * p)
  EXPECT_EQ(g->At(1, 0, 0), 1);
  EXPECT_EQ(g->At(0, 0, 1), 2);
  EXPECT_EQ(g->At(0, 1, 0), 4);
  EXPECT_EQ(g->of(7).t, 1);
  EXPECT_EQ(g->of(7).d, 1);
  EXPECT_EQ(g->of(7).p, 1);
  EXPECT_EQ(g->DataGroup(1, 0), (std::vector<int>{1, 3}));
  EXPECT_EQ(g->TensorGroup(1, 1), (std::vector<int>{6, 7}));
  EXPECT_EQ(g->PipelineGroup(0, 1), (std::vector<int>{2, 6}));
  auto m = GridMap::Make({2, 1, {3, 2, 1, 0}}, 4);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->At(0, 0, 0), 3);
  EXPECT_EQ(m->of(3).t, 0);
  EXPECT_FALSE(GridMap::Make({3, 1, {}}, 8).ok());            // 3 does not divide 8
  EXPECT_FALSE(GridMap::Make({2, 1, {0, 1, 1, 3}}, 4).ok());  // no permutation
  EXPECT_FALSE(GridMap::Make({0, 1, {}}, 4).ok());
  EXPECT_EQ(PlaceInGrid({2, 2, {}}, 8, 5).value().d, 0);
  EXPECT_EQ(RankInGrid({2, 2, {}}, 8, 1, 1, 1).value(), 7);
  EXPECT_FALSE(RankInGrid({2, 2, {}}, 8, 2, 0, 0).ok());
}

TEST(GridPlanTest, ALostRankIsFedByItsDataParallelNeighbourAndAPeerOfItsPartition) {
  const GridMap g = *GridMap::Make({2, 2, {}}, 8);
  std::vector<RankState> s = Healthy(g);
  Lose(&s, g.At(1, 1, 0));  // rank 5
  const RecoveryPlan plan = PlanRecovery(s, g.DataGroups());
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
  ASSERT_EQ(plan.needy, std::vector<int>{5});
  EXPECT_EQ(plan.holder, std::vector<int>{g.At(1, 1, 1)});  // rank 7
  EXPECT_EQ(plan.source, std::vector<int>{7});              // the only live rank of (1, 1)
}

TEST(GridPlanTest, TwoLostRanksOfDifferentGroupsAndOtherPartitionsHashesAreFine) {
  const GridMap g = *GridMap::Make({2, 2, {}}, 8);
  std::vector<RankState> s = Healthy(g);
  Lose(&s, 0);
  Lose(&s, 7);
  const RecoveryPlan plan = PlanRecovery(s, g.DataGroups());
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.needy, (std::vector<int>{0, 7}));
  EXPECT_EQ(plan.holder, (std::vector<int>{2, 5}));
  EXPECT_EQ(plan.source, (std::vector<int>{2, 5}));
}

TEST(GridPlanTest, NeighboursInOneRingCannotBeFedButInDifferentRingsCan) {
  const GridMap g = *GridMap::Make({2, 1, {}}, 6);  // 2 x 1 x 3
  std::vector<RankState> s = Healthy(g);
  Lose(&s, g.At(0, 0, 0));
  Lose(&s, g.At(0, 0, 1));  // its holder
  EXPECT_FALSE(PlanRecovery(s, g.DataGroups()).ok);
  s = Healthy(g);
  Lose(&s, g.At(0, 0, 0));
  Lose(&s, g.At(1, 0, 1));  // the same d + 1, another ring
  EXPECT_TRUE(PlanRecovery(s, g.DataGroups()).ok);
}

TEST(GridPlanTest, AGroupThatLagsPullsTheWholeWorldBack) {
  const GridMap g = *GridMap::Make({2, 2, {}}, 8);
  std::vector<RankState> s = Healthy(g);
  for (RankState& r : s) r.l1 = {10, 9}, r.l2.push_back({(g.of(r.rank).d + 1) % 2, 10});
  // Partition (0, 1)'s ranks never captured step 10.
  for (int r : g.DataGroup(0, 1)) s[r].l1 = {9, 8};
  const RecoveryPlan plan = PlanRecovery(s, g.DataGroups());
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
}

TEST(GridPlanTest, OnPaperAt64x16x128ManyLostRanksSpreadOverTheirGroupsSources) {
  const GridMap g = *GridMap::Make({64, 16, {}}, 64 * 16 * 128);
  std::vector<RankState> s = Healthy(g);
  // Every other d of partition (3, 5) lost (no two neighbours), and one rank in each of ten
  // other partitions.
  std::set<int> lost;
  for (int d = 0; d < 128; d += 2) lost.insert(g.At(3, 5, d));
  for (int k = 0; k < 10; ++k) lost.insert(g.At(10 + k, k, 7 * k));
  for (int r : lost) Lose(&s, r);
  const RecoveryPlan plan = PlanRecovery(s, g.DataGroups());
  ASSERT_TRUE(plan.ok) << plan.why;
  ASSERT_EQ(plan.needy.size(), lost.size());
  std::map<int, int> fed_by;  // source -> ranks of (3, 5) it feeds
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    const GridPlace n = g.of(plan.needy[i]), h = g.of(plan.holder[i]), src = g.of(plan.source[i]);
    EXPECT_EQ(h.t, n.t);
    EXPECT_EQ(h.p, n.p);
    EXPECT_EQ(h.d, (n.d + 1) % 128);
    EXPECT_EQ(src.t, n.t);
    EXPECT_EQ(src.p, n.p);
    EXPECT_FALSE(lost.count(plan.source[i]));
    if (n.t == 3 && n.p == 5) ++fed_by[plan.source[i]];
  }
  // 64 lost ranks over the 64 live ones of (3, 5): one each.
  EXPECT_EQ(fed_by.size(), 64u);
  for (const auto& [src, n] : fed_by) EXPECT_EQ(n, 1) << src;
}

TEST(GridPlanTest, ARankThatDescribesAnotherStateThanItsGroupHoldsNothing) {
  const GridMap g = *GridMap::Make({1, 1, {}}, 3);
  std::vector<RankState> s = Healthy(g);
  s[1].layout_hash = 42;  // its own L1 is of no use to the group
  const RecoveryPlan plan = PlanRecovery(s, g.DataGroups());
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.needy, std::vector<int>{1});
}

}  // namespace
}  // namespace rtft::protect
