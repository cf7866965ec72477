// The recovery sequence the simulated agents walk after a failure (recovery_agents.h): the
// rollback agreement as one gather (the leader plans with protect/plan.h, as
// src/protect/recover.cc does), then each replication ring's communicator through the job's store
// (a pair record per neighbour), then done. The agents' sockets, heartbeats and dispatch are in
// recovery_agents.cc.
#include "sim/recovery_agents.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "control/net/zmq_util.h"
#include "control/wire/codec.h"
#include "control/wire/delta.h"
#include "control/wire/gather.h"
#include "control/wire/messages.h"
#include "protect/plan.h"
#include "sim/sim_agents.h"

namespace rtft::bench {

using control::MsgType;
using json = nlohmann::json;

namespace {

constexpr uint64_t kLayoutHash = 42;  // the same on every rank, as Layout::shared_hash is
constexpr int64_t kTimeoutMs = 20000;

enum AskKind { kGather = 0, kResult = 1, kPut = 2, kGet = 3 };

std::string CommKey(uint64_t epoch, int k) {
  return "comm/e" + std::to_string(epoch) + "/c" + std::to_string(k) + "/unique-id";
}

std::string AgreeKey(uint64_t epoch) { return "protect/e" + std::to_string(epoch) + "/agree"; }

// A Gloo pair's record, as the backend names it (comm/e<E>/<name>/pair/<rank>/<peer>), and its
// size: the version, ranks, world, token and address in JSON, about 390 bytes.
std::string PairKey(uint64_t epoch, int ring, int from, int to) {
  return "comm/e" + std::to_string(epoch) + "/train.replica" +
         (ring == 0 ? std::string() : ".s" + std::to_string(ring)) + "/pair/" +
         std::to_string(from) + "/" + std::to_string(to);
}
constexpr size_t kPairRecordBytes = 360;

}  // namespace

void RecoveryAgents::OnEpoch(Agent& a, uint64_t epoch, size_t bytes, Clock::time_point now) {
  if (epoch <= a.epoch && a.joined) return;  // the same epoch again (a shutdown, a sync)
  a.epoch = epoch;
  PerEpoch& pe = a.epochs[epoch];
  pe.seen = now;
  pe.event_bytes = bytes;
  pe.received += bytes;
  const size_t s = static_cast<size_t>(a.slot);
  pe.rank = s < rank_of_slot_.size() ? rank_of_slot_[s] : -1;
  if (control::RoleOfSlot(membership_, a.slot) == control::Role::kRetired) {
    a.dead = true;
    return;
  }
  if (!a.joined) {
    a.joined = true;
    a.held_rank = pe.rank;
    ++joined_;
    late_at_ = now.time_since_epoch().count();  // steady() counts from the last join
    return;
  }
  if (pe.rank < 0) return;  // a spare
  // Mine(): what this rank holds (docs/protect.md, "Recovery").
  const int n = membership_.world_size;
  protect::RankState mine;
  mine.rank = pe.rank;
  mine.layout_hash = kLayoutHash;
  if (a.held_rank == pe.rank) {
    mine.was = pe.rank;
    mine.was_world = n;
    mine.l1 = {config_.step - 1, config_.step};
    const int left = (pe.rank + n - 1) % n;
    mine.l2 = {{left, config_.step - 1}, {left, config_.step}};
  }
  control::GatherRequest g;
  g.key = AgreeKey(epoch);
  g.epoch = epoch;
  g.members = n;
  g.index = pe.rank;
  g.value = protect::EncodeRankState(mine);
  g.timeout_ms = kTimeoutMs;
  if (a.slot == config_.report_slot && epoch == 2) {
    // A failure in the middle of the protocol: this rank fails where it would contribute, so
    // the gather of epoch 2 can never complete, whatever the timing, and every contribution
    // the others sent is answered kAborted once the failure moves the job on.
    control::SendTo(
        a.socket, nullptr, MsgType::kFailure,
        control::FailureBody(a.next_req++, a.slot, control::FailureKind::kDeviceError, pe.rank, 0));
    a.dead = true;
    return;
  }
  const uint64_t req = Request(a, epoch, kGather);
  Send(a, epoch, static_cast<uint8_t>(MsgType::kGather), control::GatherBody(req, g));
}

void RecoveryAgents::OnGatherValue(Agent& a, const Ask& ask, const json& body,
                                   Clock::time_point now) {
  PerEpoch& pe = a.epochs[ask.epoch];
  auto reply = control::GatherReplyFrom(body);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kAborted) {
      ++aborted_;  // the epoch moved on: its event starts the protocol again
    } else {
      Error("gather: " + reply.status().ToString());
    }
    return;
  }
  const int n = membership_.world_size;
  if (reply->result) {
    auto agreed = protect::DecodeAgreedPlan(*reply->result, n);
    if (!agreed.ok() || !agreed->plan.ok || agreed->plan.step != config_.step)
      return Error("the agreed plan: " +
                   (agreed.ok() ? agreed->plan.why : agreed.status().ToString()));
    for (int k = 0; k < config_.comm_keys; ++k) {
      const uint64_t req = Request(a, ask.epoch, kGet);
      Send(a, ask.epoch, static_cast<uint8_t>(MsgType::kKvGet),
           control::KvGetBody(req, CommKey(ask.epoch, k), kTimeoutMs));
    }
    pe.waiting = config_.comm_keys;
    if (pe.waiting == 0) NextRing(a, ask.epoch, now);
    return;
  }
  // The leader: every rank's state, the Protector's planner, the plan back to all.
  if (static_cast<int>(reply->values.size()) != n) return Error("gather: wrong number of values");
  std::vector<protect::RankState> all;
  all.reserve(reply->values.size());
  for (size_t r = 0; r < reply->values.size(); ++r)
    all.push_back(protect::DecodeRankState(reply->values[r], static_cast<int>(r)));
  std::vector<int> group(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) group[static_cast<size_t>(r)] = r;
  protect::AgreedPlan agreed;
  agreed.plan = protect::PlanRecovery(all, std::vector<std::vector<int>>{group});
  for (const auto& r : all) agreed.shrink = agreed.shrink || (r.was_world > 0 && r.was_world != n);
  if (!agreed.plan.ok || agreed.plan.step != config_.step)
    return Error("the leader's plan: " + agreed.plan.why);
  const uint64_t req = Request(a, ask.epoch, kResult);
  Send(a, ask.epoch, static_cast<uint8_t>(MsgType::kGatherResult),
       control::GatherResultBody(req, AgreeKey(ask.epoch), ask.epoch,
                                 protect::EncodeAgreedPlan(agreed)));
  // The next epoch's communicators meet through one key each (NCCL's unique id: 128 bytes).
  for (int k = 0; k < config_.comm_keys; ++k) {
    const uint64_t put = Request(a, ask.epoch, kPut);
    Send(a, ask.epoch, static_cast<uint8_t>(MsgType::kKvPut),
         control::KvPutBody(put, CommKey(ask.epoch, k), std::string(128, static_cast<char>(k))));
  }
  pe.waiting = 1 + config_.comm_keys;
}

void RecoveryAgents::NextRing(Agent& a, uint64_t epoch, Clock::time_point now) {
  PerEpoch& pe = a.epochs[epoch];
  if (pe.rings >= config_.gloo_rings) return Done(a, epoch, now);
  const int ring = pe.rings++;
  const int n = membership_.world_size, r = pe.rank;
  std::set<int> peers = {(r + n - 1) % n, (r + 1) % n};
  peers.erase(r);
  for (int p : peers) {
    const uint64_t put = Request(a, epoch, kPut);
    Send(a, epoch, static_cast<uint8_t>(MsgType::kKvPut),
         control::KvPutBody(put, PairKey(epoch, ring, r, p), std::string(kPairRecordBytes, 'r')));
    const uint64_t get = Request(a, epoch, kGet);
    Send(a, epoch, static_cast<uint8_t>(MsgType::kKvGet),
         control::KvGetBody(get, PairKey(epoch, ring, p, r), kTimeoutMs));
  }
  pe.waiting = 2 * static_cast<int>(peers.size());
  if (pe.waiting == 0) Done(a, epoch, now);
}

void RecoveryAgents::Done(Agent& a, uint64_t epoch, Clock::time_point now) {
  PerEpoch& pe = a.epochs[epoch];
  pe.is_done = true;
  pe.done = now;
  a.held_rank = pe.rank;  // restored: it holds this rank's state from now on
}

}  // namespace rtft::bench
