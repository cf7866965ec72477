// L2's sender and receiver for one epoch (docs/protect.md, "Levels"): after the L1 capture of a
// step, its replica range goes to rank + 1 over a communicator of the replicator's own, and rank
// - 1's comes into the ReplicaStore; then every rank meets in a barrier, so that once Wait(step)
// returns every rank's replica of `step` is sealed at its holder. The communicator belongs to the
// replicator's thread alone: recovery and the shrink run their transfers through Call(), in the
// same queue.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/thread.h"
#include "protect/replica_store.h"
#include "protect/snapshot.h"
#include "rtft/comm.h"

namespace rtft::protect {

class Replicator {
 public:
  using Work = std::function<Status(Communicator*)>;
  static StatusOr<std::unique_ptr<Replicator>> Start(std::unique_ptr<Communicator> comm,
                                                     Snapshot* l1, ReplicaStore* l2);
  // Aborts the communicator (a transfer in flight waits for a peer) and joins the thread.
  ~Replicator();

  // The most bytes a replica from the left neighbour may hold (its shards, from the shard table,
  // and the objects' room): a larger one is refused before any memory is reserved for it.
  void Expect(uint64_t max_replica_bytes);
  // Replicates the snapshot of `step` (once its capture is complete).
  void Submit(uint64_t step);
  // Until the exchange of `step` is over (or the replicator failed); at once for a step it was
  // never given.
  Status Wait(uint64_t step);
  // Runs `work` on the replicator's thread after everything queued before it, and returns its
  // status; the replicator's error instead once it failed.
  Status Call(Work work);

  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  struct Item {
    uint64_t step = 0;
    Work work;  // empty: replicate `step`
    std::shared_ptr<Status> result;
  };
  Replicator(std::unique_ptr<Communicator> comm, Snapshot* l1, ReplicaStore* l2);
  void Run();
  void Finish(const Item& item, const Status& s);
  Status Exchange(uint64_t step);

  std::unique_ptr<Communicator> comm_;
  const int rank_, world_;
  Snapshot* l1_;
  ReplicaStore* l2_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::vector<uint64_t> done_, submitted_;
  size_t calls_done_ = 0, calls_queued_ = 0;
  uint64_t max_in_ = 0;
  Status error_;
  bool stop_ = false;
  Thread thread_;
};

}  // namespace rtft::protect
