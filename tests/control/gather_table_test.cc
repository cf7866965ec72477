// The coordinator's gathers (control/coordinator/gather_table.h): the leader gets every
// contribution once all are in, the others the leader's result; a missing contribution times
// out, an epoch that ends aborts it, duplicates and contributions of the wrong size, epoch,
// member or rank are refused before anything is stored.
#include "control/coordinator/gather_table.h"

#include <gtest/gtest.h>

#include "control/wire/codec.h"
#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

GatherRequest Req(int index, int members = 4, uint64_t epoch = 3, bool all = false) {
  GatherRequest g;
  g.key = "protect/e3/agree";
  g.epoch = epoch;
  g.members = members;
  g.index = index;
  g.value = "state-" + std::to_string(index);
  g.all = all;
  g.timeout_ms = 1000;
  return g;
}

GatherPeer Peer(int i) { return {"peer" + std::to_string(i), 100u + i}; }

const auto kNow = SteadyClock::now();

TEST(GatherTable, TheLeaderGetsEveryValueTheOthersItsResult) {
  GatherTable t;
  for (int i : {3, 1, 0}) EXPECT_TRUE(t.Contribute(Peer(i), Req(i), 3, 4, i, kNow).empty());
  auto done = t.Contribute(Peer(2), Req(2), 3, 4, 2, kNow);
  ASSERT_EQ(done.size(), 1u);  // the leader only
  EXPECT_EQ(done[0].to.peer, "peer0");
  EXPECT_EQ(done[0].to.req, 100u);
  ASSERT_TRUE(done[0].status.ok());
  ASSERT_TRUE(done[0].values);
  EXPECT_EQ(*done[0].values,
            (std::vector<std::string>{"state-0", "state-1", "state-2", "state-3"}));
  std::vector<GatherAnswer> answers;
  ASSERT_TRUE(t.Result("protect/e3/agree", 3, 3, 0, "plan", &answers).ok());
  ASSERT_EQ(answers.size(), 3u);
  for (const auto& a : answers) {
    EXPECT_TRUE(a.status.ok());
    EXPECT_FALSE(a.values);
    EXPECT_EQ(a.result, std::optional<std::string>("plan"));
  }
  // A member that asks again (its request sent again after a takeover) gets the same answer.
  auto again = t.Contribute(Peer(7), Req(1), 3, 4, 1, kNow);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].result, std::optional<std::string>("plan"));
  EXPECT_EQ(again[0].to.peer, "peer7");
}

TEST(GatherTable, EveryMemberGetsEveryValueWithAll) {
  GatherTable t;
  std::vector<GatherAnswer> out;
  for (int i = 0; i < 3; ++i) out = t.Contribute(Peer(i), Req(i, 3, 3, true), 3, 3, i, kNow);
  ASSERT_EQ(out.size(), 3u);
  for (const auto& a : out) ASSERT_TRUE(a.values && a.values->size() == 3);
  EXPECT_EQ(out[0].values, out[2].values);  // one list, shared
  std::vector<GatherAnswer> none;
  EXPECT_EQ(t.Result("protect/e3/agree", 3, 3, 0, "x", &none).code(),
            StatusCode::kFailedPrecondition);
  // O(N^2) bytes: refused for large worlds.
  GatherTable big;
  auto r = big.Contribute(Peer(0), Req(0, 1000, 3, true), 3, 1000, 0, kNow);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status.code(), StatusCode::kInvalidArgument);
}

TEST(GatherTable, AMissingContributionTimesOut) {
  GatherTable t;
  for (int i = 0; i < 3; ++i) t.Contribute(Peer(i), Req(i), 3, 4, i, kNow);
  EXPECT_TRUE(t.Expire(kNow + milliseconds(999)).empty());
  ASSERT_TRUE(t.NextDeadline().has_value());
  EXPECT_EQ(*t.NextDeadline(), kNow + milliseconds(1000));
  auto expired = t.Expire(kNow + milliseconds(1000));
  ASSERT_EQ(expired.size(), 3u);
  for (const auto& a : expired) {
    EXPECT_EQ(a.status.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(a.status.message().find("3 of 4"), std::string::npos) << a.status;
  }
  EXPECT_FALSE(t.NextDeadline().has_value());
}

// What the coordinator fails as hung: the members a gather still waits for once one who came
// waited past its own deadline; once blamed, its waiters are left to the epoch's end.
TEST(GatherTable, AnOverdueGatherNamesTheRanksItWaitsFor) {
  GatherTable t;
  for (int i : {0, 2, 3}) t.Contribute(Peer(i), Req(i), 3, 4, i, kNow);
  EXPECT_EQ(t.Waiting(3), (std::vector<LogicalRank>{0, 2, 3}));
  EXPECT_TRUE(t.Waiting(2).empty());
  EXPECT_TRUE(t.FindOverdue(3, kNow + milliseconds(999)).empty());
  EXPECT_TRUE(t.FindOverdue(2, kNow + milliseconds(1000)).empty());  // another epoch's
  auto overdue = t.FindOverdue(3, kNow + milliseconds(1000));
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].key, "protect/e3/agree");
  EXPECT_EQ(overdue[0].ranks, std::vector<LogicalRank>{1});
  EXPECT_NE(overdue[0].why.find("3 of 4 members contributed"), std::string::npos);
  t.Blamed("protect/e3/agree");
  EXPECT_TRUE(t.FindOverdue(3, kNow + milliseconds(1000)).empty());
  EXPECT_TRUE(t.Expire(kNow + milliseconds(1000)).empty());
  EXPECT_FALSE(t.NextDeadline().has_value());  // no busy loop on a past deadline
  EXPECT_EQ(t.AbortBefore(4).size(), 3u);
  // Every member came but the leader sent no plan: the leader is the one waited for.
  GatherTable u;
  for (int i = 0; i < 4; ++i) u.Contribute(Peer(i), Req(i), 3, 4, i, kNow);
  EXPECT_EQ(u.Waiting(3), (std::vector<LogicalRank>{1, 2, 3}));
  overdue = u.FindOverdue(3, kNow + milliseconds(1000));
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].ranks, std::vector<LogicalRank>{0});
  EXPECT_NE(overdue[0].why.find("no result from its leader"), std::string::npos);
}

TEST(GatherTable, AnEpochThatEndsAbortsItsGathers) {
  GatherTable t;
  t.Contribute(Peer(0), Req(0), 3, 4, 0, kNow);
  t.Contribute(Peer(1), Req(1), 3, 4, 1, kNow);
  EXPECT_TRUE(t.AbortBefore(3).empty());
  auto aborted = t.AbortBefore(4);
  ASSERT_EQ(aborted.size(), 2u);
  for (const auto& a : aborted) EXPECT_EQ(a.status.code(), StatusCode::kAborted);
  EXPECT_EQ(t.open(), 0u);
  // A contribution of an epoch that ended, and the leader's result for one.
  auto late = t.Contribute(Peer(2), Req(2), 4, 4, 2, kNow);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].status.code(), StatusCode::kAborted);
  std::vector<GatherAnswer> none;
  EXPECT_EQ(t.Result("protect/e3/agree", 3, 4, 0, "plan", &none).code(), StatusCode::kAborted);
  EXPECT_EQ(t.open(), 0u);
}

TEST(GatherTable, DuplicatesAndWrongContributionsAreRefused) {
  GatherTable t;
  auto one = [&](const GatherRequest& g, int32_t world, LogicalRank rank, uint64_t epoch = 3) {
    auto a = t.Contribute(Peer(9), g, epoch, world, rank, kNow);
    EXPECT_EQ(a.size(), 1u);
    return a.empty() ? StatusCode::kOk : a[0].status.code();
  };
  EXPECT_EQ(one(Req(1, 5), 4, 1), StatusCode::kInvalidArgument);  // members != world
  EXPECT_EQ(one(Req(1), 4, 2), StatusCode::kInvalidArgument);     // not the sender's rank
  EXPECT_EQ(one(Req(1), 4, kNoRank), StatusCode::kInvalidArgument);
  EXPECT_EQ(one(Req(1, 4, 5), 4, 1), StatusCode::kFailedPrecondition);  // a future epoch
  GatherRequest huge = Req(1);
  huge.value.assign(kMaxGatherValueBytes + 1, 'x');
  EXPECT_EQ(one(huge, 4, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.open(), 0u);  // nothing stored for any of them

  EXPECT_TRUE(t.Contribute(Peer(1), Req(1), 3, 4, 1, kNow).empty());
  GatherRequest changed = Req(1);
  changed.value = "another state";
  EXPECT_EQ(one(changed, 4, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(one(Req(2, 4, 3, /*all=*/true), 4, 2), StatusCode::kInvalidArgument);
  std::vector<GatherAnswer> none;
  EXPECT_EQ(t.Result("protect/e3/agree", 3, 3, 0, "plan", &none).code(),
            StatusCode::kFailedPrecondition);  // before every member contributed
  for (int i : {0, 2, 3}) t.Contribute(Peer(i), Req(i), 3, 4, i, kNow);
  EXPECT_EQ(t.Result("protect/e3/agree", 3, 3, 1, "plan", &none).code(),
            StatusCode::kInvalidArgument);  // not the leader
  EXPECT_EQ(t.Result("other", 3, 3, 0, "plan", &none).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(t.Result("protect/e3/agree", 3, 3, 0, "plan", &none).ok());
  EXPECT_EQ(t.Result("protect/e3/agree", 3, 3, 0, "other plan", &none).code(),
            StatusCode::kInvalidArgument);
}

TEST(GatherTable, ContributionsBeyondOneMessageFailTheGatherForEveryone) {
  GatherTable t;
  const int n = 40;  // 40 x 32 KiB: more than a 1 MiB answer can carry
  std::vector<GatherAnswer> last;
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    GatherRequest g = Req(i, n);
    g.value.assign(32 * 1024, static_cast<char>('a' + i % 26));
    for (const auto& a : t.Contribute(Peer(i), g, 3, n, i, kNow)) {
      EXPECT_EQ(a.status.code(), StatusCode::kResourceExhausted) << a.status;
      EXPECT_NE(a.status.message().find("message limit"), std::string::npos);
      ++refused;
    }
  }
  EXPECT_EQ(refused, n);  // each member told once, none left waiting
}

TEST(GatherTable, TooManyOpenGathers) {
  GatherTable t;
  for (size_t k = 0; k < GatherTable::kMaxOpen; ++k) {
    GatherRequest g = Req(0);
    g.key = "k" + std::to_string(k);
    EXPECT_TRUE(t.Contribute(Peer(0), g, 3, 4, 0, kNow).empty());
  }
  GatherRequest g = Req(0);
  g.key = "one more";
  auto r = t.Contribute(Peer(0), g, 3, 4, 0, kNow);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status.code(), StatusCode::kResourceExhausted);
}

TEST(GatherWire, AnswersAndRequestsAreCheckedByTheCodec) {
  GatherReply reply;
  reply.values = {"a", std::string("\0b", 2)};
  auto bytes = EncodeMessage(MsgType::kGatherValue, GatherValueBody(5, reply));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto msg = DecodeMessage(bytes->data(), bytes->size());
  ASSERT_TRUE(msg.ok()) << msg.status();
  auto back = GatherReplyFrom(msg->body);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->values, reply.values);
  // Both forms at once, a value list of another type, an index beyond the members.
  auto body = GatherValueBody(5, reply);
  body["value"] = BytesValue("x");
  EXPECT_FALSE(EncodeMessage(MsgType::kGatherValue, body).ok());
  body = GatherValueBody(5, reply);
  body["values"] = nlohmann::json::array({"text, not bytes"});
  EXPECT_FALSE(EncodeMessage(MsgType::kGatherValue, body).ok());
  GatherRequest g = Req(4);  // of 4 members: 0..3
  EXPECT_FALSE(EncodeMessage(MsgType::kGather, GatherBody(1, g)).ok());
  g.index = 3;
  EXPECT_TRUE(EncodeMessage(MsgType::kGather, GatherBody(1, g)).ok());
  g.value.assign(kMaxGatherValueBytes + 1, 'x');
  EXPECT_FALSE(EncodeMessage(MsgType::kGather, GatherBody(1, g)).ok());
  // An error answer carries neither.
  auto err = GatherReplyFrom(GatherValueBody(5, StatusOr<GatherReply>(Status::Aborted("e"))));
  EXPECT_EQ(err.status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace rtft::control
