// The epoch event as a delta (control/wire/delta.h): it rebuilds the whole membership from the
// one before, it is small whatever the job's size, and a delta that does not fit what an agent
// holds (another base, a wrong hash, positions out of range) is refused.
#include "control/wire/delta.h"

#include <gtest/gtest.h>

#include "control/wire/codec.h"
#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;

// `slots` slots, the last `spares` spare, ranks in slot order.
Membership Start(int slots, int spares) {
  Membership m;
  m.epoch = 1;
  m.world_size = slots - spares;
  for (int s = 0; s < slots; ++s) {
    if (s < slots - spares) {
      m.rank_to_slot.push_back(s);
      m.slot_roles.push_back(Role::kActive);
    } else {
      m.spares.push_back(s);
      m.slot_roles.push_back(Role::kSpare);
    }
  }
  return m;
}

// Slot `lost` retired, its rank to the first spare.
ControlEvent Swap(const Membership& before, SlotId lost) {
  ControlEvent e;
  e.membership = before;
  Membership& m = e.membership;
  ++m.epoch;
  const SlotId spare = m.spares.front();
  m.spares.erase(m.spares.begin());
  const LogicalRank rank = RankOfSlot(before, lost);
  m.rank_to_slot[rank] = spare;
  m.slot_roles[spare] = Role::kActivated;
  m.slot_roles[lost] = Role::kRetired;
  m.retired.push_back(lost);
  e.failed_ranks = {rank};
  e.reason = "slot lost";
  return e;
}

// Encoded and decoded through the codec, as an agent receives it.
json OverTheWire(const json& body) {
  auto bytes = EncodeMessage(MsgType::kEventDelta, body, 1);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto msg = DecodeMessage(bytes->data(), bytes->size());
  EXPECT_TRUE(msg.ok()) << msg.status();
  return msg->body;
}

TEST(EventDelta, RebuildsTheWholeMembership) {
  const Membership a = Start(10, 2);
  const ControlEvent e = Swap(a, 3);
  auto got = EventFromDelta(OverTheWire(EventDeltaBody(e, a)), a, /*me=*/8);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->membership.epoch, 2u);
  EXPECT_EQ(got->membership.rank_to_slot, e.membership.rank_to_slot);
  EXPECT_EQ(got->membership.slot_roles, e.membership.slot_roles);
  EXPECT_EQ(got->membership.spares, std::vector<SlotId>{9});
  EXPECT_EQ(got->membership.retired, std::vector<SlotId>{3});
  EXPECT_EQ(got->failed_ranks, std::vector<LogicalRank>{3});
  EXPECT_EQ(got->reason, "slot lost");
  // The spare's own assignment, derived from the rebuilt membership.
  EXPECT_EQ(got->assignment.role, Role::kActivated);
  EXPECT_EQ(got->assignment.rank, 3);
  EXPECT_EQ(MembershipHash(got->membership), MembershipHash(e.membership));
}

TEST(EventDelta, TheDevicesTravelWithTheRanks) {
  // Ranks 0..5 on GPUs 0,1,0,1,0,1; slot 3 (rank 3, GPU 1) lost, its spare told GPU 1.
  Membership a = Start(8, 2);
  a.devices = {0, 1, 0, 1, 0, 1};
  ControlEvent e = Swap(a, 3);
  e.membership.devices = {0, 1, 0, 1, 0, 1};
  const json body = OverTheWire(EventDeltaBody(e, a));
  EXPECT_EQ(body["dpos"].size(), 0u);  // nothing changed but the slot
  auto got = EventFromDelta(body, a, /*me=*/6);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->membership.devices, e.membership.devices);
  EXPECT_EQ(got->assignment.device, 1);
  // A device that changes is carried; an agent that holds other devices asks for a sync.
  e.membership.devices[3] = 0;
  const json moved = OverTheWire(EventDeltaBody(e, a));
  got = EventFromDelta(moved, a, 6);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->assignment.device, 0);
  Membership other = a;
  other.devices[5] = 0;
  EXPECT_EQ(EventFromDelta(moved, other, 6).status().code(), StatusCode::kDataLoss);
  // The three fields come together, their positions within the list.
  auto rejected = [](json b) { return !EncodeMessage(MsgType::kEventDelta, b).ok(); };
  json b = moved;
  b.erase("dval");
  EXPECT_TRUE(rejected(b));
  b = moved;
  b["dpos"] = json::array({6});
  EXPECT_TRUE(rejected(b));
  b = moved;
  b["ndevs"] = 3;
  EXPECT_TRUE(rejected(b));
}

TEST(EventDelta, AShrinkRenumbersEveryRank) {
  const Membership a = Start(6, 0);
  ControlEvent e;
  e.membership = a;
  e.membership.epoch = 2;
  e.membership.rank_to_slot = {0, 2, 3, 4, 5};  // slot 1 lost, survivors renumbered
  e.membership.world_size = 5;
  e.membership.slot_roles[1] = Role::kRetired;
  e.membership.retired = {1};
  auto got = EventFromDelta(OverTheWire(EventDeltaBody(e, a)), a, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->membership.rank_to_slot, e.membership.rank_to_slot);
  EXPECT_EQ(got->assignment.rank, 1);
}

TEST(EventDelta, SmallAtAnyScaleAndTheFullEventIsNot) {
  const Membership a = Start(4096, 2);
  const ControlEvent e = Swap(a, 1);
  auto delta = EncodeMessage(MsgType::kEventDelta, EventDeltaBody(e, a));
  auto full = EncodeMessage(MsgType::kEvent, EventBody(e));
  ASSERT_TRUE(delta.ok() && full.ok());
  EXPECT_LT(delta->size(), 200u);
  EXPECT_GT(full->size(), 12000u);
}

TEST(EventDelta, AnotherBaseOrAWrongHashIsRefused) {
  const Membership a = Start(8, 2);
  const ControlEvent e = Swap(a, 2);
  const json body = OverTheWire(EventDeltaBody(e, a));
  Membership older = a;
  older.epoch = 0;
  EXPECT_EQ(EventFromDelta(body, older, 0).status().code(), StatusCode::kFailedPrecondition);
  // The agent holds epoch 1 but not the same membership (it missed nothing, yet differs).
  Membership other = a;
  other.rank_to_slot[0] = 5;
  EXPECT_EQ(EventFromDelta(body, other, 0).status().code(), StatusCode::kDataLoss);
  json tampered = body;
  tampered["rslot"][0] = 4;
  EXPECT_EQ(EventFromDelta(OverTheWire(tampered), a, 0).status().code(), StatusCode::kDataLoss);
}

TEST(EventDelta, TheDecoderRejectsPositionsAndSlotsOutOfRange) {
  const Membership a = Start(8, 2);
  const json body = EventDeltaBody(Swap(a, 2), a);
  auto rejected = [](json b) {
    auto bytes = EncodeMessage(MsgType::kEventDelta, b);
    return !bytes.ok();  // the encoder applies the receiver's checks
  };
  EXPECT_FALSE(rejected(body));
  json b = body;
  b["rpos"] = json::array({6});  // beyond ws
  b["rslot"] = json::array({0});
  EXPECT_TRUE(rejected(b));
  b = body;
  b["rslot"] = json::array();  // lengths differ
  EXPECT_TRUE(rejected(b));
  b = body;
  b["rslot"] = json::array({8});  // beyond nslots
  EXPECT_TRUE(rejected(b));
  b = body;
  b["spos"] = json::array({9});
  b["srole"] = json::array({1});
  EXPECT_TRUE(rejected(b));
  b = body;
  b["spares"] = json::array({8});
  EXPECT_TRUE(rejected(b));
  b = body;
  b["nslots"] = kMaxSlots + 1;
  EXPECT_TRUE(rejected(b));
}

}  // namespace
}  // namespace rtft::control
