#include "protect/replica_store.h"

#include <algorithm>
#include <atomic>

#include "core/checksum.h"
#include "protect/layout.h"
#include "protect/snapshot.h"

namespace rtft::protect {
namespace {

constexpr uint64_t kReplicaMagic = 0x3152544654525452ull;  // "RTRTFTR1"

struct ReplicaHeader {
  uint64_t magic;
  uint32_t state;
  int32_t owner;
  uint64_t step;
  uint64_t epoch;
  uint64_t bytes;
  uint64_t checksum;
};

}  // namespace

StatusOr<std::unique_ptr<ReplicaStore>> ReplicaStore::Open(const std::string& dir) {
  auto s = std::make_unique<ReplicaStore>();
  for (int k = 0; k < 2; ++k) {
    RTFT_ASSIGN_OR_RETURN(s->area_[k], ShmFile::Open(dir + "/l2." + std::to_string(k), kAlign));
  }
  return s;
}

std::vector<ReplicaStore::Held> ReplicaStore::Complete() const {
  std::vector<Held> held;
  for (int k = 0; k < 2; ++k) {
    const auto* h = reinterpret_cast<const ReplicaHeader*>(area_[k]->data());
    if (h->magic != kReplicaMagic || h->state != kComplete ||
        h->step % 2 != static_cast<uint64_t>(k) || h->bytes > area_[k]->size() - kAlign)
      continue;
    if (ChunkedXxh3(area_[k]->data() + kAlign, h->bytes) != h->checksum) continue;
    held.push_back({h->owner, h->step, h->bytes});
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.step > b.step; });
  return held;
}

std::optional<ReplicaStore::Held> ReplicaStore::Find(int owner, uint64_t step) const {
  for (const Held& h : Complete())
    if (h.owner == owner && h.step == step) return h;
  return std::nullopt;
}

const char* ReplicaStore::Data(uint64_t step) const { return area_[step % 2]->data() + kAlign; }

StatusOr<char*> ReplicaStore::Prepare(uint64_t step, uint64_t bytes) {
  ShmFile& f = *area_[step % 2];
  reinterpret_cast<ReplicaHeader*>(f.data())->state = kWriting;
  std::atomic_thread_fence(std::memory_order_release);
  RTFT_RETURN_IF_ERROR(f.Grow(kAlign + AlignUp(bytes)));
  reinterpret_cast<ReplicaHeader*>(f.data())->state = kWriting;
  return f.data() + kAlign;
}

// The checksum is the sender's, over its L1 area: it is not recomputed here, on the hot path, but
// by Complete() before a replica is ever used.
void ReplicaStore::Seal(uint64_t step, int owner, uint64_t epoch, uint64_t bytes,
                        uint64_t checksum) {
  ShmFile& f = *area_[step % 2];
  auto* h = reinterpret_cast<ReplicaHeader*>(f.data());
  h->magic = kReplicaMagic;
  h->owner = owner;
  h->step = step;
  h->epoch = epoch;
  h->bytes = bytes;
  h->checksum = checksum;
  std::atomic_thread_fence(std::memory_order_release);
  h->state = kComplete;
}

void ReplicaStore::Clear() {
  for (auto& a : area_) reinterpret_cast<ReplicaHeader*>(a->data())->state = kEmpty;
}

}  // namespace rtft::protect
