// The recovery plan (docs/protect.md, "Recovery"): what every rank publishes when a recovery
// starts, and the pure functions that every rank runs on what all published, so that all decide
// the same rollback step and who feeds whom without another round of messages (the planner in
// plan.cc, the wire form in plan_codec.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rtft/status.h"

namespace rtft::protect {

// The most ranks a world may have for the planner: what came over the network is checked against
// it before anything is sized by it.
constexpr int64_t kMaxWorld = int64_t{1} << 24;

struct RankState {
  int rank = -1;
  // The rank and world size its L1 and L2 are laid out for (they differ from the new epoch's
  // after a shrink; -1 and 0: it holds no state of this job yet).
  int was = -1;
  int was_world = 0;
  uint64_t layout_hash = 0;                  // Layout::shared_hash: the same on every rank of a job
  std::vector<uint64_t> l1;                  // complete L1 steps
  std::vector<std::pair<int, uint64_t>> l2;  // (owner, step) of complete replicas
  // After a replay found a device faulty: the newest step the replays vouch for, which the
  // recovery may not pass (docs/protect.md, "Replay"); none otherwise.
  std::optional<uint64_t> ceiling;
  // Its application's state is as the application built it for a world of this many ranks
  // (Held::untouched); 0: it may have changed since.
  int untouched_world = 0;
};

// Who feeds whom, decided identically on every rank from the published states.
struct RecoveryPlan {
  bool ok = false;
  uint64_t step = 0;
  std::vector<int> needy;      // ranks without a usable L1 snapshot of `step`
  std::vector<int> holder;     // per needy rank: the rank holding its replica
  std::vector<int> source;     // per needy rank: a rank of its group whose L1 has `step`
  int replicated_source = -1;  // the first rank whose L1 has `step`
  std::string why;             // when !ok
};

// The newest step that every rank either holds in its L1 or has a replica of at its right
// neighbour, with one rank holding it in L1 (the replicated tensors' source). Ranks that publish
// another `layout_hash` hold nothing usable. One data-parallel group of every rank, in rank
// order; replicas' owners are ranks.
RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks, uint64_t layout_hash);
// The same per data-parallel group (docs/protect.md, "3D layouts"): `groups` holds each group's
// ranks in ring order, a rank's replica is on the next of its group, replicas' owners are
// positions in the group, and the replicated tensors of a group come from one of its own (the
// needy ranks of a group spread over its sources in turn). A group's layout hash is the one most
// of its members publish (the lowest of a tie); the step is one that every group can restore.
RecoveryPlan PlanRecovery(const std::vector<RankState>& ranks,
                          const std::vector<std::vector<int>>& groups);
// After a shrink: `old` indexed by the ranks of the world the state was laid out for, the lost
// ones holding nothing. The newest step that every survivor holds in its own L1 and whose replica
// of every lost rank is complete on its old right neighbour; `needy` and `holder` in old ranks.
RecoveryPlan PlanShrink(std::vector<RankState> old, const std::vector<bool>& survived,
                        uint64_t layout_hash);

// After a shrink of a tensor x pipeline x data layout (docs/protect.md, "3D layouts"): the whole
// data-parallel replicas that lost a rank left, the others go on renumbered t + T * (d' + D' * p)
// (d' counts the replicas below that stayed). Every rank computes it from what all published.
struct GridShrinkPlan {
  bool ok = false;
  uint64_t step = 0;
  std::string why;  // when !ok
  int tensor = 1, pipeline = 1, old_data = 0, new_data = 0;
  std::vector<int> left;        // the old replicas d that left, ascending
  std::vector<int> new_of_old;  // per old rank: its new rank (-1: its replica left)
  // Per old rank: the old rank whose memory has its state of `step`: itself, or (its replica
  // left) its right neighbour in its data-parallel ring, which holds its L2 replica.
  std::vector<int> holder;
};
// `old` indexed by the old world's ranks (rank order t + T * (d + D * p)), each survivor's
// published state at its old rank, `new_of_old` the new rank of each (-1: not in the new world).
// The newest step that every survivor holds in its own L1 and whose replica of every rank that
// left is complete on its right neighbour; not ok when the survivors are no whole replicas, their
// new ranks are not the layout's order, or the state of a rank that left is on no survivor.
GridShrinkPlan PlanGridShrink(int tensor, int pipeline, const std::vector<RankState>& old,
                              const std::vector<int>& new_of_old);
// The part of `plan` that data-parallel group (t, p) moves, in positions of its ring: `needy`
// the old positions that left, `holder` the old position that holds each one's replica;
// `new_of_old` (out) the new position of each old one (-1: it left).
RecoveryPlan GroupShrinkPart(const GridShrinkPlan& plan, int t, int p,
                             std::vector<int>* new_of_old);

// The JSON a rank publishes; anything malformed decodes as holding nothing.
std::string EncodeRankState(const RankState& state);
RankState DecodeRankState(const std::string& text, int rank);

// What the leader decides for a shrink from every rank's state (docs/protect.md, "Shrink"), sent
// with the agreement so that no rank needs the others' states: the old world's size and each old
// rank's new rank (-1: lost), why no plan can use it (`fresh`: a rank of the new world holds no
// state of the old one), and the plan: `plan` (in old ranks) without a grid, `grid` on one (each
// rank takes its data-parallel group's part, GroupShrinkPart).
struct ShrinkDecision {
  int old_size = 0;
  std::vector<int> new_of_old;
  std::string fresh;
  RecoveryPlan plan;
  GridShrinkPlan grid;
};
// `all`: every rank of the new world's published state, indexed by its new rank.
ShrinkDecision DecideShrink(const std::vector<RankState>& all, int tensor, int pipeline,
                            uint64_t layout_hash);

// What the leader of the rollback agreement (rank 0) decided from every rank's state and sends
// the others through the coordinator's gather (docs/protect.md, "Recovery"): the plan, or that
// the job shrank and the shrink's decision.
struct AgreedPlan {
  RecoveryPlan plan;
  // When `plan` (or the shrink's decision) is not ok: the L3 version every rank restores, as the
  // leader found it (the newest complete one, at or before a ceiling memory could not meet; one
  // version for all, whatever a retired engine commits meanwhile); none: there is none.
  std::optional<uint64_t> l3_version;
  bool shrink = false;
  ShrinkDecision shrink_decision;  // when `shrink`
  // The job starts again at step 0 (docs/protect.md, "Lost before the first snapshot"): `plan`
  // is not ok, no L3 version exists, and every rank's state is as its application built it or
  // its L1 holds step 0 and no later one. Each rank keeps the state it built or restores step 0.
  bool start_over = false;
};
// Whether the job can start again at step 0 from what every rank of `all` (the new world, in rank
// order) holds (`start_over` above): each rank's state untouched and built for that world, or
// step 0 of the job's layout (`layout_hash`) in its L1, laid out for that world, and no later step.
bool CanStartOver(const std::vector<RankState>& all, uint64_t layout_hash);
std::string EncodeAgreedPlan(const AgreedPlan& agreed);
// Checks every field against a world of `world` ranks (it came over the network).
StatusOr<AgreedPlan> DecodeAgreedPlan(const std::string& text, int world);

}  // namespace rtft::protect
