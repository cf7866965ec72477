// Gathers and event deltas through the real coordinator and AgentClients: one message from each
// member, the leader's result to the others, the gathers of an epoch aborted when a failure moves
// the job on, and every agent's membership rebuilt from the delta equal to the coordinator's.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <thread>

#include "control/control_test_util.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using testing::JobConfig;
using testing::TestJob;

GatherRequest Req(int rank, uint64_t epoch, const std::string& key = "agree") {
  GatherRequest g;
  g.key = key;
  g.epoch = epoch;
  g.members = 3;
  g.index = rank;
  g.value = "state of " + std::to_string(rank);
  g.timeout_ms = 5000;
  return g;
}

// Polls a StartGather handle until its answer is in (or the test's deadline passes).
StatusOr<GatherReply> Await(AgentClient& a, uint64_t handle) {
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = a.PollGather(handle)) return std::move(*r);
    std::this_thread::sleep_for(milliseconds(5));
  }
  return Status::DeadlineExceeded("no answer in the test's time");
}

TEST(Gather, OneMessageEachAndTheLeadersResultToTheOthers) {
  TestJob job(JobConfig{4, 1});
  ASSERT_TRUE(job.JoinAll());
  std::vector<std::future<StatusOr<GatherReply>>> others;
  for (int r : {1, 2})
    others.push_back(
        std::async(std::launch::async, [&job, r] { return job.agent(r).Gather(Req(r, 1)); }));
  auto lead = job.agent(0).Gather(Req(0, 1));
  ASSERT_TRUE(lead.ok()) << lead.status();
  EXPECT_EQ(lead->values, (std::vector<std::string>{"state of 0", "state of 1", "state of 2"}));
  EXPECT_FALSE(lead->result.has_value());
  ASSERT_TRUE(job.agent(0).GatherResult("agree", 1, "the plan").ok());
  for (auto& f : others) {
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->result, std::optional<std::string>("the plan"));
    EXPECT_TRUE(r->values.empty());
  }
  // A spare holds no rank: its contribution is refused.
  GatherRequest spare = Req(0, 1, "other");
  auto refused = job.agent(3).Gather(spare);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
}

TEST(Gather, AFailureDuringTheGatherAbortsIt) {
  TestJob job(JobConfig{4, 1});
  ASSERT_TRUE(job.JoinAll());
  auto h1 = job.agent(1).StartGather(Req(1, 1));
  auto h2 = job.agent(2).StartGather(Req(2, 1));
  ASSERT_TRUE(h1.ok() && h2.ok());
  // Rank 0 fails before it contributes: the job moves to epoch 2, the gather ends.
  ASSERT_TRUE(job.agent(0).ReportFailure(FailureKind::kDeviceError, 0, 0).ok());
  auto r1 = Await(job.agent(1), *h1);
  auto r2 = Await(job.agent(2), *h2);
  EXPECT_EQ(r1.status().code(), StatusCode::kAborted) << r1.status();
  EXPECT_EQ(r2.status().code(), StatusCode::kAborted) << r2.status();
  // The old epoch's gather is refused at once; the new one works, the spare as rank 0.
  EXPECT_EQ(job.agent(1).Gather(Req(1, 1, "late")).status().code(), StatusCode::kAborted);
  std::vector<std::future<StatusOr<GatherReply>>> next;
  for (SlotId s : {1, 2})
    next.push_back(std::async(std::launch::async,
                              [&job, s] { return job.agent(s).Gather(Req(s, 2, "again")); }));
  auto lead = job.agent(3).Gather(Req(0, 2, "again"));
  ASSERT_TRUE(lead.ok()) << lead.status();
  EXPECT_EQ(lead->values.size(), 3u);
  ASSERT_TRUE(job.agent(3).GatherResult("again", 2, "plan 2").ok());
  for (auto& f : next) {
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->result, std::optional<std::string>("plan 2"));
  }
}

// Without the primary's hang detection, a member whose deadline passes gets the gather's error.
TEST(Gather, AMissingMemberTimesOut) {
  JobConfig cfg{4, 1};
  cfg.hang_detection = false;
  TestJob job(cfg);
  ASSERT_TRUE(job.JoinAll());
  GatherRequest g = Req(1, 1);
  g.timeout_ms = 200;
  auto r = job.agent(1).Gather(g);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find("1 of 3"), std::string::npos) << r.status();
}

// With it (the default), the members that never came are failed as hung at that deadline, and
// the member that came gets the next epoch: its gather ends kAborted, not with an error.
TEST(Gather, AMissingMemberIsFailedAsHung) {
  TestJob job(JobConfig{4, 1});
  ASSERT_TRUE(job.JoinAll());
  GatherRequest g = Req(1, 1);
  g.timeout_ms = 200;
  auto r = job.agent(1).Gather(g);
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status();
  ControlEvent e = job.NextEvent(1, milliseconds(5000));
  EXPECT_EQ(e.membership.epoch, 2u);
  EXPECT_EQ(e.failed_ranks, (std::vector<LogicalRank>{0, 2}));
  EXPECT_NE(e.reason.find("slot 0 (rank 0): hang"), std::string::npos) << e.reason;
}

TEST(EventDelta, EveryAgentRebuildsTheCoordinatorsMembership) {
  TestJob job(JobConfig{5, 2});
  ASSERT_TRUE(job.JoinAll());
  ASSERT_TRUE(job.agent(1).ReportFailure(FailureKind::kDeviceError, 1, 0).ok());
  ASSERT_TRUE(job.agent(2).ReportFailure(FailureKind::kDeviceError, 2, 0).ok());
  const Membership want = job.coord().membership();
  ASSERT_EQ(want.epoch, 3u);
  std::map<SlotId, ControlEvent> seen;
  for (SlotId s : {0, 3, 4}) {
    const ControlEvent e = seen[s] = job.EventAtLeast(s, 3);
    EXPECT_EQ(e.membership.rank_to_slot, want.rank_to_slot) << "slot " << s;
    EXPECT_EQ(e.membership.slot_roles, want.slot_roles) << "slot " << s;
    EXPECT_EQ(e.membership.spares, want.spares) << "slot " << s;
    EXPECT_EQ(e.membership.retired, want.retired) << "slot " << s;
  }
  EXPECT_EQ(seen[3].assignment.rank, 1);
  EXPECT_EQ(seen[4].assignment.rank, 2);
}

}  // namespace
}  // namespace rtft::control
