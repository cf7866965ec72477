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

namespace rtft::protect {
namespace {

// The survivors' view after a shrink of T x P x D that dropped the replicas `left`: each survivor
// at its old rank with the new rank the layout gives it (t + T * (d' + D' * p)), the ranks of the
// replicas that left holding nothing.
struct Shrunk {
  std::vector<RankState> old;
  std::vector<int> new_of_old;
};

Shrunk DropReplicas(const GridMap& g, const std::set<int>& left) {
  Shrunk s{Healthy(g), std::vector<int>(g.world(), -1)};
  const int kept = g.data() - static_cast<int>(left.size());
  for (int r = 0; r < g.world(); ++r) {
    const GridPlace& at = g.of(r);
    if (left.count(at.d)) {
      s.old[r] = RankState();
      s.old[r].rank = r;
      continue;
    }
    int d = 0;
    for (int below = 0; below < at.d; ++below) d += left.count(below) ? 0 : 1;
    s.new_of_old[r] = at.t + g.tensor() * (d + kept * at.p);
  }
  return s;
}

TEST(GridShrinkTest, TheReplicaThatLeftIsFedToItsRightNeighboursGroup) {
  auto g = GridMap::Make({2, 2, {}}, 8);
  ASSERT_TRUE(g.ok());
  Shrunk s = DropReplicas(*g, {1});  // ranks 2, 3, 6, 7
  GridShrinkPlan plan = PlanGridShrink(2, 2, s.old, s.new_of_old);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
  EXPECT_EQ(plan.left, std::vector<int>{1});
  EXPECT_EQ(plan.old_data, 2);
  EXPECT_EQ(plan.new_data, 1);
  EXPECT_EQ(plan.new_of_old, (std::vector<int>{0, 1, -1, -1, 2, 3, -1, -1}));
  // (1, 1, 1) = rank 7's replica is on (1, 1, 0) = rank 5; survivors hold their own.
  EXPECT_EQ(plan.holder, (std::vector<int>{0, 1, 0, 1, 4, 5, 4, 5}));
  std::vector<int> pos;
  RecoveryPlan part = GroupShrinkPart(plan, 1, 1, &pos);
  EXPECT_TRUE(part.ok);
  EXPECT_EQ(part.needy, std::vector<int>{1});
  EXPECT_EQ(part.holder, std::vector<int>{0});
  EXPECT_EQ(pos, (std::vector<int>{0, -1}));
  // Replica 0 leaving instead: its replicas are on replica 1, renumbered 0.
  s = DropReplicas(*g, {0});
  plan = PlanGridShrink(2, 2, s.old, s.new_of_old);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.new_of_old, (std::vector<int>{-1, -1, 0, 1, -1, -1, 2, 3}));
  EXPECT_EQ(plan.holder, (std::vector<int>{2, 3, 2, 3, 6, 7, 6, 7}));
}

TEST(GridShrinkTest, LargeLayoutsOnPaper) {
  // 64 x 16 x 128 (131072 ranks): replicas 5, 77 and 127 leave (127's replica wraps to 0).
  const int T = 64, P = 16, D = 128;
  auto g = GridMap::Make({T, P, {}}, T * P * D);
  ASSERT_TRUE(g.ok());
  Shrunk s = DropReplicas(*g, {5, 77, 127});
  // A survivor lacks step 9 and a holder step 9's replica: the world goes back to step 8.
  s.old[g->At(3, 2, 1)].l1 = {8};
  const int holder77 = g->At(60, 15, 78);
  s.old[holder77].l2 = {{77, 8}};
  GridShrinkPlan plan = PlanGridShrink(T, P, s.old, s.new_of_old);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 8u);
  EXPECT_EQ(plan.left, (std::vector<int>{5, 77, 127}));
  EXPECT_EQ(plan.new_data, D - 3);
  EXPECT_EQ(plan.holder[g->At(60, 15, 77)], holder77);
  EXPECT_EQ(plan.holder[g->At(7, 9, 127)], g->At(7, 9, 0));
  EXPECT_EQ(plan.holder[g->At(7, 9, 5)], g->At(7, 9, 6));
  EXPECT_EQ(plan.new_of_old[g->At(7, 9, 6)], 7 + T * (5 + (D - 3) * 9));
  // Group (7, 9)'s part in ring positions.
  std::vector<int> pos;
  RecoveryPlan part = GroupShrinkPart(plan, 7, 9, &pos);
  EXPECT_EQ(part.needy, (std::vector<int>{5, 77, 127}));
  EXPECT_EQ(part.holder, (std::vector<int>{6, 78, 0}));
  EXPECT_EQ(pos[4], 4);
  EXPECT_EQ(pos[5], -1);
  EXPECT_EQ(pos[6], 5);
  EXPECT_EQ(pos[126], 124);  // replicas 5 and 77 below it left
  // With the holder's replica of step 8 gone as well, no step is whole.
  s.old[g->At(3, 2, 1)].l1 = {9, 8};
  s.old[holder77].l2.clear();
  plan = PlanGridShrink(T, P, s.old, s.new_of_old);
  EXPECT_FALSE(plan.ok);
  EXPECT_NE(plan.why.find("not replicated on rank " + std::to_string(holder77)), std::string::npos)
      << plan.why;
}

TEST(GridShrinkTest, SurvivorsThatAreNoWholeReplicasOrNotInTheLayoutsOrderAreRefused) {
  auto g = GridMap::Make({2, 2, {}}, 12);  // D = 3
  ASSERT_TRUE(g.ok());
  // Replicas 1 and 2 both left: replica 1's replicas were on replica 2.
  Shrunk s = DropReplicas(*g, {1, 2});
  GridShrinkPlan plan = PlanGridShrink(2, 2, s.old, s.new_of_old);
  EXPECT_FALSE(plan.ok);
  EXPECT_NE(plan.why.find("both left"), std::string::npos) << plan.why;
  // A replica with a survivor and a lost rank (a dense renumbering of a launcher without --grid).
  s = DropReplicas(*g, {});
  s.new_of_old[g->At(1, 0, 1)] = -1;
  plan = PlanGridShrink(2, 2, s.old, s.new_of_old);
  EXPECT_FALSE(plan.ok);
  EXPECT_NE(plan.why.find("no whole data-parallel replicas"), std::string::npos) << plan.why;
  // Whole replicas, but numbered otherwise than t + T (d' + D' p).
  s = DropReplicas(*g, {0});
  std::swap(s.new_of_old[g->At(0, 0, 1)], s.new_of_old[g->At(1, 0, 1)]);
  plan = PlanGridShrink(2, 2, s.old, s.new_of_old);
  EXPECT_FALSE(plan.ok);
  EXPECT_NE(plan.why.find("not the layout's rank"), std::string::npos) << plan.why;
  // No replica left; a world the grid does not divide; mismatched inputs.
  s = DropReplicas(*g, {0, 1, 2});
  EXPECT_FALSE(PlanGridShrink(2, 2, s.old, s.new_of_old).ok);
  s = DropReplicas(*g, {0});
  EXPECT_FALSE(PlanGridShrink(5, 1, s.old, s.new_of_old).ok);
  EXPECT_FALSE(PlanGridShrink(0, 2, s.old, s.new_of_old).ok);
  s.new_of_old.pop_back();
  EXPECT_FALSE(PlanGridShrink(2, 2, s.old, s.new_of_old).ok);
}

}  // namespace
}  // namespace rtft::protect
