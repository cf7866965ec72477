// L2's memory on the holder: what this rank holds of its left neighbour's state, two steps of it,
// in memory files that outlive the process (<dir>/l2.0, <dir>/l2.1: one per step parity), each
// with a header and the sender's XXH3 checksum (docs/protect.md, "Levels").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protect/shm_file.h"
#include "rtft/status.h"

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
  // The complete replica of `owner`'s `step`, if this rank holds one.
  std::optional<Held> Find(int owner, uint64_t step) const;
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

}  // namespace rtft::protect
