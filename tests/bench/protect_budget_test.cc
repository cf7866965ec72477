// What `rtft-bench protect` reads of rtft-train's "done" lines (the protection's host traffic and
// each thread's CPU seconds) and the node budget it derives from them: per protected step, the
// mean of the ranks; a line without the counters, a rank missing, no protected step or a number
// too large is no budget at all.
#include "bench/protect/protect_budget.h"

#include <gtest/gtest.h>

#include <string>

namespace rtft::bench {
namespace {

std::string Done(int rank, uint64_t l2, uint64_t steps, uint64_t copied, uint64_t hashed,
                 const std::string& threads) {
  return "[train " + std::to_string(rank) +
         "] done steps=120 loss_ema=2.38 digest=39d5801dbc0546fa step_s=0.1 cpu_step_s=0.1 "
         "fence_wait_s=0.000001 replica_wait_s=0.000002 state_bytes=1000 l2_bytes=" +
         std::to_string(l2) + " l2_s=0.5 protected_steps=" + std::to_string(steps) +
         " l1_copied_bytes=" + std::to_string(copied) +
         " l1_hashed_bytes=" + std::to_string(hashed) + " threads_cpu_s=" + threads + " t=1.0\n";
}

TEST(ProtectBudget, TheRanksCountersPerProtectedStepTheirMean) {
  const std::string out = "[train 0] start rank=0\n" +
                          Done(0, 2000, 10, 1000, 1100, "rtft-train:2.000,rtft-l1-hash:0.100") +
                          "noise\n" +
                          Done(1, 4000, 10, 3000, 3300, "rtft-train:4.000,ZMQbg/IO/0:0.020");
  const auto b = ParseBudget(out, 2);
  ASSERT_TRUE(b.has_value());
  EXPECT_DOUBLE_EQ(b->l2_bytes, 300);  // (200 + 400) / 2
  EXPECT_DOUBLE_EQ(b->l1_copied_bytes, 200);
  EXPECT_DOUBLE_EQ(b->l1_hashed_bytes, 220);
  EXPECT_DOUBLE_EQ(b->thread_cpu_s.at("rtft-train"), 0.3);
  EXPECT_DOUBLE_EQ(b->thread_cpu_s.at("rtft-l1-hash"), 0.005);  // one rank's, over two
  EXPECT_DOUBLE_EQ(b->thread_cpu_s.at("ZMQbg/IO/0"), 0.001);
}

TEST(ProtectBudget, NoBudgetWithoutEveryRanksCounters) {
  const std::string one = Done(0, 2000, 10, 1000, 1100, "rtft-train:2.000");
  EXPECT_FALSE(ParseBudget(one, 2).has_value()) << "a rank's line is missing";
  EXPECT_FALSE(ParseBudget(one + one + one, 2).has_value()) << "more lines than ranks";
  EXPECT_FALSE(ParseBudget(Done(0, 2000, 0, 1000, 1100, "rtft-train:2.000"), 1).has_value())
      << "no protected step";
  const std::string older =
      "[train 0] done steps=120 loss_ema=2.38 digest=39d5801dbc0546fa step_s=0.1 l2_bytes=5 "
      "l2_s=0.5\n";
  EXPECT_FALSE(ParseBudget(older, 1).has_value()) << "a trainer without the counters";
  EXPECT_FALSE(
      ParseBudget(Done(0, 2000, 10, 1000, 1100, "x:1" + std::string(400, '9')), 1).has_value())
      << "a number no double holds";
  EXPECT_FALSE(ParseBudget("", 0).has_value());
}

TEST(ProtectBudget, TheNodesTrafficCoresAndTheStateItCouldProtect) {
  RankBudget r;
  r.l1_copied_bytes = 1e9;
  r.l1_hashed_bytes = 1e9;
  r.l2_bytes = 2e9;  // 4 GB per step and rank
  r.thread_cpu_s["rtft-l1-hash"] = 0.2;
  NodeInputs in;
  in.step_s_on = 0.5;
  in.cpu_extra_s = 0.25;  // half a core per rank
  in.state_bytes = 1'000'000'000;
  in.node_ranks = 8;
  in.triad_gb_per_s = 128;
  in.host_cores = 16;
  const nlohmann::json j = NodeBudget({r, r, r}, in);
  EXPECT_EQ(j["name"], "protect-node");
  EXPECT_DOUBLE_EQ(j["host_bytes_per_step"].get<double>(), 4e9);
  EXPECT_DOUBLE_EQ(j["host_gb_per_s_per_rank"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(j["node_host_gb_per_s"].get<double>(), 64);
  EXPECT_DOUBLE_EQ(j["node_share_of_triad"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["cpu_s_per_step_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["node_cores"].get<double>(), 4);
  // 4 bytes of traffic per byte of state: 128 GB/s x 0.5 s / (8 x 4) = 2 GB per rank; 0.25 CPU
  // s per GB: 16 cores x 0.5 s / (8 x 0.25 s/GB) = 4 GB per rank.
  EXPECT_DOUBLE_EQ(j["node_state_bytes_per_rank_max_by_memory"].get<double>(), 2e9);
  EXPECT_DOUBLE_EQ(j["node_state_bytes_per_rank_max_by_cores"].get<double>(), 4e9);
  EXPECT_DOUBLE_EQ(j["thread_cpu_s_per_step"]["rtft-l1-hash"].get<double>(), 0.2);
  // Without a triad or a state, no limit is claimed.
  in.triad_gb_per_s = 0;
  in.state_bytes = 0;
  const nlohmann::json none = NodeBudget({r}, in);
  EXPECT_EQ(none["node_share_of_triad"].get<double>(), 0);
  EXPECT_EQ(none["node_state_bytes_per_rank_max_by_memory"].get<double>(), 0);
  EXPECT_EQ(none["node_state_bytes_per_rank_max_by_cores"].get<double>(), 0);
}

}  // namespace
}  // namespace rtft::bench
