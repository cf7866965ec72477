#include "runtime/protect/replica.h"

#include <algorithm>
#include <cstring>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"

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

// What precedes a replica on the wire.
struct WireHeader {
  uint64_t step;
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
    if (Xxh3(area_[k]->data() + kAlign, h->bytes) != h->checksum) continue;
    held.push_back({h->owner, h->step, h->bytes});
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.step > b.step; });
  return held;
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

Replicator::Replicator(std::unique_ptr<Communicator> comm, Snapshot* l1, ReplicaStore* l2)
    : comm_(std::move(comm)), l1_(l1), l2_(l2) {
  thread_ = std::thread([this] { Run(); });
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A transfer in flight waits for a peer: end it.
  if (comm_) comm_->Abort();
  thread_.join();
}

void Replicator::Submit(uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(step);
    submitted_.push_back(step);
    if (submitted_.size() > 8) submitted_.erase(submitted_.begin());
  }
  cv_.notify_all();
}

Status Replicator::Wait(uint64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  // A step this replicator was never given (one of an earlier epoch) has nothing to wait for.
  if (std::find(submitted_.begin(), submitted_.end(), step) == submitted_.end()) return error_;
  cv_.wait(lock, [&] {
    return !error_.ok() || stop_ || std::find(done_.begin(), done_.end(), step) != done_.end() ||
           (!done_.empty() && done_.back() > step);
  });
  if (!error_.ok()) return error_;
  if (std::find(done_.begin(), done_.end(), step) != done_.end() ||
      (!done_.empty() && done_.back() > step))
    return Status::Ok();
  return Status::Aborted("replication stopped");
}

// Never throws; an error stops the thread and is reported by Wait.
void Replicator::Run() {
  while (true) {
    uint64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      step = queue_.front();
      queue_.pop_front();
    }
    Status s;
    try {
      s = Exchange(step);
    } catch (const std::exception& e) {
      s = Status::Internal(std::string("replication: ") + e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      error_ = s;
      cv_.notify_all();
      return;
    }
    done_.push_back(step);
    if (done_.size() > 8) done_.erase(done_.begin());
    cv_.notify_all();
  }
}

// Rank r sends its replica range of `step` to r + 1 and receives r - 1's. A send completes when
// its receiver takes it, so even ranks send first and odd ranks receive first: the ring never
// waits on itself.
Status Replicator::Exchange(uint64_t step) {
  const int n = comm_->world_size(), r = comm_->rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const Layout& layout = l1_->layout();
  const AreaHeader* area = l1_->header(step);
  const char* mine = l1_->payload(step) + layout.shard_begin;
  // The capture computed the range's checksum as it copied it.
  WireHeader out{step, layout.objects_begin - layout.shard_begin + area->object_bytes,
                 area->replica_checksum};
  auto send = [&]() -> Status {
    FaultPoint("protect.l2.send");
    RTFT_RETURN_IF_ERROR(comm_->Send(&out, sizeof(out), DType::kUInt8, right));
    return comm_->Send(mine, out.bytes, DType::kUInt8, right);
  };
  auto recv = [&]() -> Status {
    WireHeader in{};
    RTFT_RETURN_IF_ERROR(comm_->Recv(&in, sizeof(in), DType::kUInt8, left));
    if (in.step != step)
      return Status::DataLoss("rank " + std::to_string(left) + " replicated step " +
                              std::to_string(in.step) + " while this rank is at " +
                              std::to_string(step));
    RTFT_ASSIGN_OR_RETURN(char* dst, l2_->Prepare(step, in.bytes));
    RTFT_RETURN_IF_ERROR(comm_->Recv(dst, in.bytes, DType::kUInt8, left));
    l2_->Seal(step, left, comm_->epoch(), in.bytes, in.checksum);
    return Status::Ok();
  };
  if (r % 2 == 0) {
    RTFT_RETURN_IF_ERROR(send());
    RTFT_RETURN_IF_ERROR(recv());
  } else {
    RTFT_RETURN_IF_ERROR(recv());
    RTFT_RETURN_IF_ERROR(send());
  }
  // Every rank has now sealed its neighbour's replica of `step`: only from here on may a rank's
  // next capture drop step - 1 from its snapshot (docs/protect.md, "Why a barrier").
  return comm_->Barrier();
}

}  // namespace rtft::protect
