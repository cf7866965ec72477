// The parts of a Protector that outlive an epoch, and one epoch's communicators (docs/protect.md,
// "Code"). The facade (protector.h) keeps them; a Recovery or a Shrink (recovery.h) borrows the
// lasting ones through Parts and owns the Epoch it makes until it hands it back to be installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "protect/grid.h"
#include "protect/l3_writer.h"
#include "protect/layout.h"
#include "protect/plan.h"
#include "protect/replica_store.h"
#include "protect/replicator.h"
#include "protect/shard_table.h"
#include "protect/snapshot.h"
#include "rtft/protect.h"

namespace rtft::protect {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Epoch;
struct Parts;

// The options as the application gave them, and what Start() resolved from them and from the
// settings table.
struct Settings {
  ProtectOptions options;
  milliseconds recovery_timeout{0};
  int device = 0;             // the CUDA device of the training communicator and step
  int l2_streams = 2;         // RTFT_PROTECT_L2_STREAMS: the replicator's communicators
  bool sdc_check = true;      // RTFT_PROTECT_SDC_CHECK: the replicated tensors' cross-check
  bool sdc_fence = false;     // RTFT_PROTECT_SDC_FENCE: the fence waits for the cross-check
  int64_t replay_every = 0;   // RTFT_PROTECT_REPLAY_EVERY: the replay of a step by a peer (0: off)
  bool check_finite = false;  // RTFT_PROTECT_CHECK_FINITE: the check for non-finite gradients
  // RTFT_PROTECT_RESUME_FROM: the L3 version a job started again resumes from.
  enum class ResumeFrom { kLatest, kAgreed, kReplayed } resume_from = ResumeFrom::kLatest;

  size_t ObjectRoom() const {
    return options.max_object_bytes ? options.max_object_bytes : (1u << 20);
  }
};

// What this rank holds across epochs (held.cc, placement.cc): the state the application described
// and its layout, the L1 snapshot and the L2 replicas in memory files under `dir`, and every
// rank's shards in the world L1 and L2 are laid out for (`world` ranks, this one being `rank`;
// -1 and 0 before the first placement).
struct Held {
  // What the sharded entries of the layout describe: the application's memory, or (a process
  // restarted in the middle of a shrink) an old world's snapshot that only the shrink may use.
  enum class Shards { kApplication, kOldWorldSnapshot };

  // The memory files: the directory, the snapshot (a restarted process may keep one laid out for
  // an old world: AdoptOldLayout) and the replica store.
  Status Open(const Runtime& rt, const Settings& settings);
  Status AdoptOldLayout(const Runtime& rt, const Settings& settings);
  // What this rank publishes when a recovery starts.
  RankState Mine(int rank) const;
  // `step` restored from L1, and the application told.
  Status Restored(uint64_t step, bool sharded);
  // The state described again (a shrink): the snapshot laid out for it, the replicas dropped.
  Status Relayout(Layout new_layout, std::shared_ptr<StateProvider> new_state);
  // placement.cc: every rank's shard coordinates for the layout as it is now (the epoch's
  // replication communicator), and for a shrink the old world's table from a rank that has it.
  Status PlaceShards(const Epoch& epoch);
  Status ShareOldTable(const Epoch& epoch, int old_world);

  std::shared_ptr<StateProvider> state;
  ResizeState resize;
  Layout layout;
  Shards shards = Shards::kApplication;
  std::string dir;
  bool owned_dir = false;
  std::unique_ptr<Snapshot> l1;
  std::unique_ptr<ReplicaStore> l2;
  ShardTable table;
  int rank = -1;
  int world = 0;
  // The application's state is as it built it: no step has begun and nothing was restored into
  // it. A job that loses a rank before its first snapshot starts again from such states
  // (docs/protect.md, "Lost before the first snapshot").
  bool untouched = true;
  int built_world = 0;  // the world the runtime said when the protection opened
};

// One epoch's communicators (epoch.cc): the training one over every rank, one per group of the
// grid, and the replicator over this rank's data-parallel group. Made and dropped as a whole.
struct Epoch {
  // Drops what it holds, then makes the communicators of `epoch` (kAborted once the job moved on).
  Status Build(const Parts& parts, uint64_t epoch);
  void Drop();
  // The L3 engine of this rank and world (a recovery opens it in the background: L3Writer).
  Status OpenL3(const Parts& parts, L3Writer::When when = L3Writer::When::kNow) const;

  // The grid of the epoch, and its group communicators (null where the degree is 1, and all of
  // them when the grid is data parallel only: then the data-parallel group is `train`).
  GridMap grid;
  std::unique_ptr<Communicator> train, tensor, pipeline, data;
  std::unique_ptr<Replicator> replicator;
};

// The lasting parts a Recovery, a Shrink and the L3 fallback borrow from the facade.
struct Parts {
  Runtime* rt = nullptr;
  const Settings* settings = nullptr;
  Held* held = nullptr;
  L3Writer* l3 = nullptr;
  std::shared_ptr<ReplicaCounters> counters;  // the replicator's, read by Protector::stats()
};

}  // namespace rtft::protect
