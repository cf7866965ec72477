// L2's sender and receiver for one epoch (docs/protect.md, "Levels"): once the L1 capture of a
// step has copied the state, its replica range goes to rank + 1 over communicators of the
// replicator's own, and rank - 1's comes into the ReplicaStore; the range's checksum follows its
// bytes, once the capture has sealed the area; then every rank meets in a barrier, so that once
// Wait(step) returns every rank's replica of `step` is sealed at its holder. With several
// communicators (streams) the range is cut into one stripe per stream, each sent and received on a
// thread of its own, half of them sending first and half receiving first, so that both directions
// of every link carry data at once. The communicators belong to the replicator's threads alone:
// recovery and the shrink run their transfers through Call(), on the first, in the same queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/thread.h"
#include "core/thread_pool.h"
#include "protect/replica_store.h"
#include "protect/snapshot.h"
#include "rtft/comm.h"

namespace rtft::protect {

// What the exchanges moved and how long they took, summed over the replicators of every epoch.
struct ReplicaCounters {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> micros{0};
};

// What the cross-check of one step found (docs/protect.md, "Silent data corruption"): the ring
// positions whose replicated tensors differ from the majority's copy, or, with no majority (two
// copies that differ), none named.
struct Corruption {
  uint64_t step = 0;
  std::vector<int> ranks;            // ring positions (data-parallel indexes); empty: no majority
  int copies = 0;                    // of the replicated tensors compared
  std::vector<std::string> tensors;  // the names of those whose copies differ
};

class Replicator {
 public:
  using Work = std::function<Status(Communicator*)>;
  // One communicator per stream, all over the same ranks (at least one).
  static StatusOr<std::unique_ptr<Replicator>> Start(
      std::vector<std::unique_ptr<Communicator>> streams, Snapshot* l1, ReplicaStore* l2,
      std::shared_ptr<ReplicaCounters> counters = nullptr);
  // Aborts the communicators (a transfer in flight waits for a peer) and joins the threads.
  ~Replicator();

  // The most bytes a replica from the left neighbour may hold (its shards, from the shard table,
  // and the objects' room): a larger one is refused before any memory is reserved for it.
  void Expect(uint64_t max_replica_bytes);
  // Replicates the sealed snapshot of `step`.
  void Submit(uint64_t step);
  // Replicates the snapshot of `step` whose bytes are final (its objects `object_bytes`) and
  // whose checksums are still in the making: `sealed` says when its capture is over (its
  // status), and the checksum is sent then.
  void Submit(uint64_t step, uint64_t object_bytes, std::shared_future<Status> sealed);
  // Until the exchange of `step` is over (or the replicator failed); for a step it was never
  // given, until every exchange given so far is over (they read L1 areas the caller may reuse).
  Status Wait(uint64_t step);
  // Runs `work` on the replicator's thread after everything queued before it, and returns its
  // status; the replicator's error instead once it failed.
  Status Call(Work work);

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // What a step's cross-check found wrong, once (the oldest first); nothing while every copy
  // agreed. `check`: whether the exchange compares the copies at all (RTFT_PROTECT_SDC_CHECK).
  // When the check finds a corrupt copy it acts at once, on the replicator's thread, where every
  // rank of the ring learns the same thing from the same checksums (not at the next BeginStep,
  // which a rank may never reach before the repair's epoch aborts its step): every rank drops its
  // snapshot of the step, so that recovery goes back to the older one every rank holds (where
  // one is missing, only a corrupt copy's is dropped and recovery feeds it), and enters a barrier;
  // once it is through, the ring's asker (the first corrupt copy's rank; with no majority, rank 0)
  // calls `report` with the step, which asks the coordinator for the repair's epoch. Without the
  // barrier the asker's gather can end before a peer's, whose gather the repair's epoch then
  // aborts: that peer keeps the corrupt snapshot and feeds it.
  std::optional<Corruption> TakeCorruption();
  // Whether the check of `step` found a corrupt copy not taken yet.
  bool Disagreed(uint64_t step);
  // Whether each step's exchange compares the copies (on, and more than one copy).
  bool checking() const { return check_ && world_ > 1; }
  void set_check(bool check, std::function<void(uint64_t)> report = nullptr) {
    check_ = check;
    report_ = std::move(report);
  }

 private:
  struct Item {
    uint64_t step = 0;
    Work work;                          // empty: replicate `step`
    std::shared_future<Status> sealed;  // of `step`'s capture; invalid: sealed already
    uint64_t object_bytes = 0;          // with `sealed`
    std::shared_ptr<Status> result;
  };
  Replicator(std::vector<std::unique_ptr<Communicator>> streams, Snapshot* l1, ReplicaStore* l2);
  void Run();
  void Finish(const Item& item, const Status& s);
  Status Exchange(const Item& item);
  // The verdict on the ranks' checksums of their replicated tensors for `step` (by ring
  // position), which differ (`tensors`: those whose copies differ): drops this rank's snapshot of
  // the step (every rank's where each holds the older snapshot `back`, whose copies agreed; else a
  // corrupt copy's only), keeps the verdict for TakeCorruption and returns whether this rank is
  // the ring's asker.
  // cross_check.cc: the gather of every rank's checksum `own` of its replicated tensors of
  // `step`, and on a disagreement the verdict, acted on by every rank before a barrier, then
  // reported by the ring's asker.
  Status Compare(uint64_t step, uint64_t own);
  bool CrossCheck(uint64_t step, const std::vector<uint64_t>& sums, std::optional<uint64_t> back,
                  std::vector<std::string> tensors);
  // Stripe `j` of the `send_bytes` at `send` to the right and of the `recv_bytes` into `recv` from
  // the left, on stream j.
  Status Stripe(size_t j, const char* send, uint64_t send_bytes, char* recv, uint64_t recv_bytes);
  void AbortAll();

  std::vector<std::unique_ptr<Communicator>> streams_;
  Communicator* comm_;                // streams_[0]: headers, the barrier, Call()
  std::unique_ptr<ThreadPool> pool_;  // the other streams' threads
  std::shared_ptr<ReplicaCounters> counters_;
  const int rank_, world_;
  Snapshot* l1_;
  ReplicaStore* l2_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::vector<uint64_t> done_, submitted_;
  size_t calls_done_ = 0, calls_queued_ = 0;
  size_t steps_submitted_ = 0, steps_finished_ = 0;  // replicas given, and ended either way
  uint64_t max_in_ = 0;
  std::deque<Corruption> corrupt_;  // mu_'s
  std::atomic<bool> check_{true};
  std::function<void(uint64_t)> report_;  // set before the first exchange
  Status error_;
  bool stop_ = false;
  Thread thread_;
};

}  // namespace rtft::protect
