// The recovery plan (src/protect/plan.cc): from what every rank published, the newest
// step every rank can restore and who feeds the ranks that hold nothing. A pure function: every
// rank computes it alone and all must agree.
#include <gtest/gtest.h>

#include "protect/plan.h"

namespace rtft::protect {
namespace {

RankState Holds(int rank, std::vector<uint64_t> l1, std::vector<std::pair<int, uint64_t>> l2,
                uint64_t hash = 7) {
  RankState s;
  s.rank = rank;
  s.layout_hash = hash;
  s.l1 = std::move(l1);
  s.l2 = std::move(l2);
  return s;
}

TEST(PlanTest, EveryRankWithItsOwnSnapshotNeedsNobody) {
  auto plan = PlanRecovery({Holds(0, {9, 8}, {{3, 9}}), Holds(1, {9, 8}, {{0, 9}}),
                            Holds(2, {8, 9}, {{1, 9}}), Holds(3, {9, 8}, {{2, 8}})},
                           7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
  EXPECT_TRUE(plan.needy.empty());
}

TEST(PlanTest, TheNewestStepThatEveryoneHasWins) {
  // Rank 1 captured step 10 before the failure; the others did not.
  auto plan = PlanRecovery({Holds(0, {9, 8}, {}), Holds(1, {10, 9}, {}), Holds(2, {9, 8}, {})}, 7);
  ASSERT_TRUE(plan.ok);
  EXPECT_EQ(plan.step, 9u);
}

TEST(PlanTest, ASpareIsFedByItsRightNeighbourAndAPeer) {
  auto plan = PlanRecovery({Holds(0, {9, 8}, {{3, 9}, {3, 8}}), Holds(1, {9, 8}, {{0, 9}}),
                            Holds(2, {}, {}), Holds(3, {9, 8}, {{2, 9}, {2, 8}})},
                           7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
  ASSERT_EQ(plan.needy, std::vector<int>({2}));
  EXPECT_EQ(plan.holder, std::vector<int>({3}));
  EXPECT_EQ(plan.replicated_source, 0);
}

TEST(PlanTest, AReplicaThatLagsPullsTheStepBack) {
  // Rank 3 received rank 2's replica of step 8 only: step 8 is where all can be.
  auto plan = PlanRecovery(
      {Holds(0, {9, 8}, {}), Holds(1, {9, 8}, {}), Holds(2, {}, {}), Holds(3, {9, 8}, {{2, 8}})},
      7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 8u);
  EXPECT_EQ(plan.needy, std::vector<int>({2}));
}

TEST(PlanTest, TwoNonNeighboursLostAreBothFed) {
  auto plan = PlanRecovery(
      {Holds(0, {5, 4}, {{3, 5}}), Holds(1, {}, {}), Holds(2, {5, 4}, {{1, 5}}), Holds(3, {}, {})},
      7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.needy, std::vector<int>({1, 3}));
  EXPECT_EQ(plan.holder, std::vector<int>({2, 0}));
}

TEST(PlanTest, NeighboursLostTogetherCannotBeFed) {
  // Rank 1's replica lived on rank 2, which is lost too.
  auto plan = PlanRecovery(
      {Holds(0, {5, 4}, {{3, 5}}), Holds(1, {}, {}), Holds(2, {}, {}), Holds(3, {5, 4}, {{2, 5}})},
      7);
  EXPECT_FALSE(plan.ok);
  EXPECT_NE(plan.why.find("rank 1"), std::string::npos) << plan.why;
}

TEST(PlanTest, AnotherLayoutHoldsNothingUsable) {
  // Rank 1 declared other replicated tensors (another program, another build).
  auto plan = PlanRecovery({Holds(0, {5}, {}), Holds(1, {5}, {}, 99)}, 7);
  EXPECT_FALSE(plan.ok);
  auto alone = PlanRecovery({Holds(0, {}, {})}, 7);
  EXPECT_FALSE(alone.ok);
}

TEST(PlanTest, AShrinkFeedsTheLostRanksFromSurvivorsOnly) {
  // Rank 2 of 4 is lost: its step 9 is replicated on rank 3, which survived.
  const std::vector<RankState> old = {Holds(0, {9, 8}, {{3, 9}}), Holds(1, {9, 8}, {{0, 9}}),
                                      Holds(2, {}, {}), Holds(3, {9, 8}, {{2, 9}, {2, 8}})};
  auto plan = PlanShrink(old, {true, true, false, true}, 7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 9u);
  EXPECT_EQ(plan.needy, std::vector<int>({2}));
  EXPECT_EQ(plan.holder, std::vector<int>({3}));
}

TEST(PlanTest, AShrinkNeverFeedsASurvivorFromAReplica) {
  // Survivor 1 lacks step 9 in its own snapshot: step 8, which every survivor holds, is chosen
  // even though rank 2 holds rank 1's replica of 9 (a survivor restores its own state only).
  const std::vector<RankState> old = {Holds(0, {9, 8}, {{3, 9}, {3, 8}}), Holds(1, {8}, {{0, 9}}),
                                      Holds(2, {9, 8}, {{1, 9}, {1, 8}}), Holds(3, {}, {})};
  auto plan = PlanShrink(old, {true, true, true, false}, 7);
  ASSERT_TRUE(plan.ok) << plan.why;
  EXPECT_EQ(plan.step, 8u);
  EXPECT_EQ(plan.needy, std::vector<int>({3}));
  EXPECT_EQ(plan.holder, std::vector<int>({0}));
}

TEST(PlanTest, AShrinkThatLostAReplicaWithItsHolderCannotGoOn) {
  // Ranks 1 and 2 are lost together: rank 1's replica was on rank 2.
  const std::vector<RankState> old = {Holds(0, {9}, {{3, 9}}), Holds(1, {}, {}), Holds(2, {}, {}),
                                      Holds(3, {9}, {{2, 9}})};
  EXPECT_FALSE(PlanShrink(old, {true, false, false, true}, 7).ok);
  // A survivor list of the wrong size is refused, not read past its end.
  EXPECT_FALSE(PlanShrink(old, {true, false}, 7).ok);
  // What a lost rank is said to hold (stale state of a process that is gone) is never used: its
  // state must come from its replica.
  const std::vector<RankState> stale = {Holds(0, {9}, {}), Holds(1, {9}, {})};
  EXPECT_FALSE(PlanShrink(stale, {false, true}, 7).ok);
}

TEST(PlanTest, TheWorldARankHeldStateForSurvivesTheStoreAndNonsenseIsIgnored) {
  RankState s = Holds(1, {4}, {{0, 4}});
  s.was = 2;
  s.was_world = 4;
  const RankState back = DecodeRankState(EncodeRankState(s), 1);
  EXPECT_EQ(back.was, 2);
  EXPECT_EQ(back.was_world, 4);
  EXPECT_EQ(back.l1, s.l1);
  for (const char* text : {R"({"hash":7,"l1":[],"l2":[],"was":4,"was_world":4})",
                           R"({"hash":7,"l1":[],"l2":[],"was":-1,"was_world":4})",
                           R"({"hash":7,"l1":[],"l2":[],"was":0,"was_world":0})",
                           R"({"hash":7,"l1":[],"l2":[],"was":0,"was_world":1e30})",
                           R"({"hash":7,"l1":[],"l2":[],"was":"0","was_world":4})",
                           R"({"hash":7,"l1":[],"l2":[],"was":0,"was_world":99999999999})"}) {
    const RankState r = DecodeRankState(text, 0);
    EXPECT_EQ(r.was, -1) << text;
    EXPECT_EQ(r.was_world, 0) << text;
  }
}

}  // namespace
}  // namespace rtft::protect
