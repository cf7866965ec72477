// L2: each rank's sharded tensors and objects of a step, sent after its L1 capture to the ring
// neighbour (rank + 1) over a communicator of its own, in the background; and what this rank
// holds of its left neighbour's, two steps of it, in memory files that outlive the process
// (<dir>/l2.0, <dir>/l2.1: one per step parity). docs/protect.md, "L2".
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rtft/comm.h"
#include "runtime/protect/shm_file.h"
#include "runtime/protect/snapshot.h"

namespace rtft::protect {

class ReplicaStore {
 public:
  static StatusOr<std::unique_ptr<ReplicaStore>> Open(const std::string& dir);

  struct Held {
    int owner = -1;  // the rank whose state it is
    uint64_t step = 0;
    uint64_t bytes = 0;
  };
  // Replicas that are complete and check out, newest first.
  std::vector<Held> Complete() const;
  // The payload of the replica of `step`, when complete.
  const char* Data(uint64_t step) const;
  // Room for `bytes` in the area of `step`'s parity, marked incomplete until Seal.
  StatusOr<char*> Prepare(uint64_t step, uint64_t bytes);
  // Marks it complete with the sender's checksum, which Complete() checks (not this call).
  void Seal(uint64_t step, int owner, uint64_t epoch, uint64_t bytes, uint64_t checksum);
  void Clear();

 private:
  std::unique_ptr<ShmFile> area_[2];
};

// The background sender and receiver of one epoch: Submit(step) after the L1 capture of `step`;
// the thread sends that snapshot's replica range to rank + 1, receives rank - 1's into the store,
// and meets every rank in a barrier: once Wait(step) returns, every rank's replica of `step` is
// sealed at its holder. Errors (an aborted communicator) are kept and reported by Wait.
class Replicator {
 public:
  Replicator(std::unique_ptr<Communicator> comm, Snapshot* l1, ReplicaStore* l2);
  ~Replicator();  // stops the thread (aborting the communicator if a transfer is in flight)

  void Submit(uint64_t step);
  // Until the exchange of `step` is over (or the replicator failed); at once for a step it was
  // never given.
  Status Wait(uint64_t step);
  Communicator* comm() const { return comm_.get(); }

 private:
  void Run();
  Status Exchange(uint64_t step);

  std::unique_ptr<Communicator> comm_;
  Snapshot* l1_;
  ReplicaStore* l2_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_;
  std::vector<uint64_t> done_, submitted_;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rtft::protect
