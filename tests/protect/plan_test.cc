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

// The leader decides a shrink from the new world's states (each survivor saying which old rank
// it was) and every rank gets the decision with the agreement: the plan in old ranks and the
// new rank of each old one, back bit for bit through the wire format.
TEST(PlanTest, TheLeadersShrinkDecisionTravelsWithTheAgreement) {
  // Old world of 4, old rank 2 lost; the survivors 0, 1, 3 are the new ranks 0, 1, 2.
  std::vector<RankState> now = {Holds(0, {9, 8}, {{3, 9}}), Holds(1, {9, 8}, {{0, 9}}),
                                Holds(2, {9, 8}, {{2, 9}, {2, 8}})};
  const int was[] = {0, 1, 3};
  for (int r = 0; r < 3; ++r) {
    now[r].was = was[r];
    now[r].was_world = 4;
  }
  AgreedPlan agreed;
  agreed.shrink = true;
  agreed.shrink_decision = DecideShrink(now, 1, 1, 7);
  const ShrinkDecision& d = agreed.shrink_decision;
  EXPECT_EQ(d.old_size, 4);
  EXPECT_EQ(d.new_of_old, std::vector<int>({0, 1, -1, 2}));
  EXPECT_TRUE(d.fresh.empty());
  ASSERT_TRUE(d.plan.ok) << d.plan.why;
  EXPECT_EQ(d.plan.step, 9u);
  EXPECT_EQ(d.plan.needy, std::vector<int>({2}));
  EXPECT_EQ(d.plan.holder, std::vector<int>({3}));
  auto back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->shrink);
  EXPECT_EQ(back->shrink_decision.old_size, 4);
  EXPECT_EQ(back->shrink_decision.new_of_old, d.new_of_old);
  EXPECT_EQ(back->shrink_decision.plan.step, 9u);
  EXPECT_EQ(back->shrink_decision.plan.needy, d.plan.needy);
  EXPECT_EQ(back->shrink_decision.plan.holder, d.plan.holder);

  // A new rank that held nothing of the old world: no plan, and the reason travels.
  now[1].was = -1;
  now[1].was_world = 0;
  const ShrinkDecision fresh = DecideShrink(now, 1, 1, 7);
  EXPECT_FALSE(fresh.plan.ok);
  EXPECT_NE(fresh.fresh.find("holds no state of the old one"), std::string::npos) << fresh.fresh;
}

TEST(PlanTest, AGridShrinkDecisionTravelsAndEachGroupTakesItsPart) {
  // 2 x 1 x 3 (tensor 2, data 3): replica d = 1 (old ranks 2, 3) left; everyone holds step 5,
  // and each holds its left neighbour's replica in its data-parallel ring (by position d): old
  // ranks 4 and 5 (d = 2) those of d = 1, old ranks 0 and 1 (d = 0) those of d = 2.
  std::vector<RankState> now;
  const int was[] = {0, 1, 4, 5};
  for (int r = 0; r < 4; ++r) {
    RankState s = Holds(r, {5}, {});
    s.was = was[r];
    s.was_world = 6;
    now.push_back(s);
  }
  now[2].l2 = {{1, 5}};
  now[3].l2 = {{1, 5}};
  now[0].l2 = {{2, 5}};
  now[1].l2 = {{2, 5}};
  AgreedPlan agreed;
  agreed.shrink = true;
  agreed.shrink_decision = DecideShrink(now, 2, 1, 7);
  const GridShrinkPlan& g = agreed.shrink_decision.grid;
  ASSERT_TRUE(g.ok) << g.why;
  auto back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 4);
  ASSERT_TRUE(back.ok()) << back.status();
  const GridShrinkPlan& b = back->shrink_decision.grid;
  EXPECT_EQ(b.step, g.step);
  EXPECT_EQ(b.holder, g.holder);
  EXPECT_EQ(b.left, g.left);
  EXPECT_EQ(b.new_data, g.new_data);
  for (int t = 0; t < 2; ++t) {
    std::vector<int> mine, theirs;
    const RecoveryPlan here = GroupShrinkPart(g, t, 0, &mine);
    const RecoveryPlan there = GroupShrinkPart(b, t, 0, &theirs);
    EXPECT_EQ(here.needy, there.needy);
    EXPECT_EQ(here.holder, there.holder);
    EXPECT_EQ(mine, theirs);
  }
}

TEST(PlanTest, AShrinkDecisionFromTheNetworkIsChecked) {
  AgreedPlan agreed;
  agreed.shrink = true;
  ShrinkDecision& d = agreed.shrink_decision;
  d.old_size = 4;
  d.new_of_old = {0, 1, -1, 2};
  d.plan.ok = true;
  d.plan.step = 9;
  d.plan.needy = {2};
  d.plan.holder = {3};
  d.plan.source = {0};
  ASSERT_TRUE(DecodeAgreedPlan(EncodeAgreedPlan(agreed), 3).ok());
  auto refused = [&](const AgreedPlan& a, int world) {
    return !DecodeAgreedPlan(EncodeAgreedPlan(a), world).ok();
  };
  AgreedPlan bad = agreed;
  bad.shrink_decision.new_of_old = {0, 1, -1, 3};  // a new rank outside the new world of 3
  EXPECT_TRUE(refused(bad, 3));
  bad = agreed;
  bad.shrink_decision.new_of_old = {0, 1, 2};  // not one per old rank
  EXPECT_TRUE(refused(bad, 3));
  bad = agreed;
  bad.shrink_decision.plan.holder = {4};  // an old rank outside the old world
  EXPECT_TRUE(refused(bad, 3));
  bad = agreed;
  bad.shrink_decision.grid.ok = true;  // a grid plan that fits no old world
  bad.shrink_decision.grid.tensor = 2;
  bad.shrink_decision.grid.pipeline = 1;
  bad.shrink_decision.grid.old_data = 3;
  bad.shrink_decision.grid.new_data = 2;
  bad.shrink_decision.grid.holder = {0, 1, 2, 3};
  EXPECT_TRUE(refused(bad, 3));
  // An old rank's new rank of 2^64 - 1 would read as -1 (lost) if it wrapped.
  std::string text = EncodeAgreedPlan(agreed);
  const std::string lost = "\"new_of_old\":[0,1,-1,2]";
  ASSERT_NE(text.find(lost), std::string::npos) << text;
  text.replace(text.find(lost), lost.size(), "\"new_of_old\":[0,1,18446744073709551615,2]");
  EXPECT_FALSE(DecodeAgreedPlan(text, 3).ok());
  // A shrink without its decision, and texts that are no plan.
  EXPECT_FALSE(DecodeAgreedPlan(R"({"v":1,"shrink":true,"ok":false,"step":0,"needy":[],)"
                                R"("holder":[],"source":[],"rsource":-1,"why":""})",
                                3)
                   .ok());
  for (const char* text :
       {"", "[]", "{\"v\":2}", "{\"v\":1,\"shrink\":true,\"decision\":{\"old\":1e40}}"})
    EXPECT_FALSE(DecodeAgreedPlan(text, 3).ok()) << text;
}

// After a replay found a device faulty (docs/protect.md, "Replay"): a survivor's ceiling and the
// leader's choice of an L3 version travel through the wire format; anything but a step is refused
// (a plan) or read as no ceiling (a rank's state).
TEST(PlanTest, TheCeilingOfAFaultyDeviceTravelsWithTheStateAndThePlan) {
  RankState s = Holds(1, {32, 31}, {{0, 32}});
  EXPECT_FALSE(DecodeRankState(EncodeRankState(s), 1).ceiling.has_value());
  s.ceiling = 29;
  EXPECT_EQ(DecodeRankState(EncodeRankState(s), 1).ceiling, std::optional<uint64_t>(29));
  for (const char* text : {R"({"hash":7,"l1":[],"l2":[],"ceiling":-3})",
                           R"({"hash":7,"l1":[],"l2":[],"ceiling":"29"})",
                           R"({"hash":7,"l1":[],"l2":[],"ceiling":2.5})"})
    EXPECT_FALSE(DecodeRankState(text, 0).ceiling.has_value()) << text;
  AgreedPlan agreed;
  agreed.plan.why = "memory holds no step that old";
  auto back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->l3_version.has_value());
  agreed.l3_version = 29;
  back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->l3_version, std::optional<uint64_t>(29));
  std::string text = EncodeAgreedPlan(agreed);
  text.replace(text.find("\"l3_version\":29"), 15, "\"l3_version\":-1");
  EXPECT_FALSE(DecodeAgreedPlan(text, 3).ok()) << text;
}

// A rank lost before the first snapshot (docs/protect.md, "Lost before the first snapshot"):
// the job may start again at step 0 when every rank's state is as its application built it for
// this world, or its L1 holds step 0, laid out for this world, and nothing later.
TEST(PlanTest, AJobStartsAgainAtStepZeroOnlyFromUntouchedStatesOrStepZero) {
  const auto built = [](int rank, int world) {
    RankState s = Holds(rank, {}, {});
    s.untouched_world = world;
    return s;
  };
  const auto began = [](int rank, std::vector<uint64_t> l1,
                        std::vector<std::pair<int, uint64_t>> l2, int world) {
    RankState s = Holds(rank, std::move(l1), std::move(l2));
    s.was = rank;
    s.was_world = world;
    return s;
  };
  EXPECT_TRUE(CanStartOver({built(0, 3), built(1, 3), began(2, {0}, {{1, 0}}, 3)}, 7));
  EXPECT_TRUE(CanStartOver({began(0, {0}, {}, 2), built(1, 2)}, 7));
  // A rank that began step 0 and holds no snapshot of it: its state may have changed.
  EXPECT_FALSE(CanStartOver({Holds(0, {}, {}), built(1, 2)}, 7));
  // Past step 0 somewhere: in L1, or a replica of a later step.
  EXPECT_FALSE(CanStartOver({began(0, {1, 0}, {}, 2), built(1, 2)}, 7));
  EXPECT_FALSE(CanStartOver({began(0, {0}, {{1, 1}}, 2), built(1, 2)}, 7));
  // Built, or laid out, for another world than this one (a shrink while the job started).
  EXPECT_FALSE(CanStartOver({built(0, 3), built(1, 3)}, 7));
  EXPECT_FALSE(CanStartOver({began(0, {0}, {}, 3), built(1, 2)}, 7));
  // Another layout, or nobody.
  RankState other = built(1, 2);
  other.layout_hash = 8;
  EXPECT_FALSE(CanStartOver({built(0, 2), other}, 7));
  EXPECT_FALSE(CanStartOver({}, 7));
  // An untouched rank whose L1 holds a later step (a restarted process's old snapshot).
  RankState odd = built(1, 2);
  odd.l1 = {3};
  EXPECT_FALSE(CanStartOver({built(0, 2), odd}, 7));
}

TEST(PlanTest, UntouchedAndTheStartAtStepZeroTravelAndAreChecked) {
  RankState s = Holds(1, {}, {});
  EXPECT_EQ(DecodeRankState(EncodeRankState(s), 1).untouched_world, 0);
  s.untouched_world = 4;
  EXPECT_EQ(DecodeRankState(EncodeRankState(s), 1).untouched_world, 4);
  for (const char* text : {R"({"hash":7,"l1":[],"l2":[],"untouched":-4})",
                           R"({"hash":7,"l1":[],"l2":[],"untouched":"4"})",
                           R"({"hash":7,"l1":[],"l2":[],"untouched":true})",
                           R"({"hash":7,"l1":[],"l2":[],"untouched":0})",
                           R"({"hash":7,"l1":[],"l2":[],"untouched":99999999999})"})
    EXPECT_EQ(DecodeRankState(text, 0).untouched_world, 0) << text;
  AgreedPlan agreed;
  agreed.plan.why = "rank 1's state of step 0 is held nowhere";
  auto back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->start_over);
  agreed.start_over = true;
  back = DecodeAgreedPlan(EncodeAgreedPlan(agreed), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->start_over);
  std::string text = EncodeAgreedPlan(agreed);
  text.replace(text.find("\"start_over\":true"), 17, "\"start_over\":1");
  EXPECT_FALSE(DecodeAgreedPlan(text, 2).ok()) << text;
  // With a plan, or an L3 version, a start at step 0 is a contradiction.
  agreed.l3_version = 5;
  EXPECT_FALSE(DecodeAgreedPlan(EncodeAgreedPlan(agreed), 2).ok());
  agreed.l3_version.reset();
  agreed.plan.ok = true;
  EXPECT_FALSE(DecodeAgreedPlan(EncodeAgreedPlan(agreed), 2).ok());
}

}  // namespace
}  // namespace rtft::protect
