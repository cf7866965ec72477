#include "protect/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread_pool.h"

namespace rtft::protect {
namespace {

constexpr uint64_t kFileMagic = 0x3146544654525452ull;  // "RTRTFTF1"
constexpr uint64_t kAreaMagic = 0x3141544654525452ull;  // "RTRTFTA1"
constexpr uint32_t kFormat = 7;  // 5: chunked checksums; 7: buffers in the replica range
// Bytes copied and then hashed at a time: small enough to be hashed from the core's own cache.
constexpr size_t kPiece = 64 * 1024;

// The file's first 4 KiB: which layout its areas hold.
struct FileHeader {
  uint64_t magic;
  uint32_t format;
  uint32_t reserved;
  uint64_t layout_hash;
  uint64_t area_bytes;
  // The bytes of each sharded tensor the file is laid out for (sharded_count 0: more than
  // kMaxRecordedShards), so that a process restarted after its world shrank can open its old
  // snapshot (Snapshot::Peek).
  uint32_t sharded_count;
  uint32_t reserved2;
  uint64_t sharded_bytes[kMaxRecordedShards];
};
static_assert(sizeof(FileHeader) <= kAlign, "the file header fits its 4 KiB page");

}  // namespace

StatusOr<std::unique_ptr<Snapshot>> Snapshot::Open(const std::string& dir, const Layout& layout) {
  std::unique_ptr<Snapshot> s(new Snapshot(layout));
  const size_t total = kAlign + 2 * s->area_bytes();
  RTFT_ASSIGN_OR_RETURN(s->file_, ShmFile::Open(dir + "/l1", total));
  auto* fh = reinterpret_cast<FileHeader*>(s->file_->data());
  // A file of another layout (or none yet) starts over: its areas mean nothing to this state.
  if (fh->magic != kFileMagic || fh->format != kFormat || fh->layout_hash != layout.hash ||
      fh->area_bytes != s->area_bytes() || s->file_->size() < total) {
    RTFT_RETURN_IF_ERROR(s->file_->Grow(total));
    fh = reinterpret_cast<FileHeader*>(s->file_->data());
    std::memset(s->file_->data(), 0, kAlign);
    for (uint64_t k = 0; k < 2; ++k) std::memset(s->header(k), 0, sizeof(AreaHeader));
    fh->format = kFormat;
    fh->layout_hash = layout.hash;
    fh->area_bytes = s->area_bytes();
    if (layout.sharded.size() <= kMaxRecordedShards) {
      fh->sharded_count = static_cast<uint32_t>(layout.sharded.size());
      for (size_t i = 0; i < layout.sharded.size(); ++i)
        fh->sharded_bytes[i] = layout.sharded[i].bytes;
    }
    fh->magic = kFileMagic;
  }
  RTFT_RETURN_IF_ERROR(s->Pin());
  return s;
}

std::optional<Snapshot::FileLayout> Snapshot::Peek(const std::string& dir) {
  // Read only, through one descriptor: never a link, never a FIFO (O_NONBLOCK, then fstat).
  const int fd = open((dir + "/l1").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  FileHeader fh{};
  struct stat st {};
  const bool read_ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                       st.st_size >= static_cast<off_t>(kAlign) &&
                       pread(fd, &fh, sizeof(fh), 0) == static_cast<ssize_t>(sizeof(fh));
  close(fd);
  if (!read_ok || fh.magic != kFileMagic || fh.format != kFormat ||
      fh.sharded_count > kMaxRecordedShards)
    return std::nullopt;
  FileLayout out;
  out.layout_hash = fh.layout_hash;
  out.sharded_bytes.assign(fh.sharded_bytes, fh.sharded_bytes + fh.sharded_count);
  return out;
}

Status Snapshot::Relayout(const std::string& dir, const Layout& layout) {
  Unpin();  // the mapping goes: the fresh one is registered instead
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> fresh, Open(dir, layout));
  // Areas of an equal layout hold another rank's shards of the old world: never valid here.
  for (uint64_t k = 0; k < 2; ++k) fresh->Invalidate(k);
  layout_ = fresh->layout_;
  tensor_bytes_ = fresh->tensor_bytes_;
  file_ = std::move(fresh->file_);
  pinned_ = fresh->pinned_;
  fresh->pinned_ = false;
  return Status::Ok();
}

uint64_t Snapshot::TensorBytes(const Layout& layout) {
  uint64_t bytes = 0;
  for (const auto* list : {&layout.replicated, &layout.sharded})
    for (const Entry& e : *list) bytes += e.bytes;
  return bytes;
}

AreaHeader* Snapshot::header(uint64_t step) const {
  return reinterpret_cast<AreaHeader*>(file_->data() + kAlign + (step % 2) * area_bytes());
}

char* Snapshot::payload(uint64_t step) const {
  return reinterpret_cast<char*>(header(step)) + kAlign;
}

bool Snapshot::Verify(uint64_t step) const {
  const AreaHeader* h = header(step);
  if (h->magic != kAreaMagic || h->format != kFormat || h->state != kComplete ||
      h->layout_hash != layout_.hash || h->step != step ||
      h->payload_bytes != layout_.payload_bytes || h->object_bytes > layout_.object_capacity)
    return false;
  const char* p = payload(step);
  const size_t end = layout_.objects_begin + h->object_bytes;
  hashed_bytes_.fetch_add(end, std::memory_order_relaxed);
  const AreaSums sums = Sums(p, end);
  return sums.compared == h->checksum && sums.replica == h->replica_checksum;
}

AreaSums Snapshot::Sums(const char* p, size_t end) const {
  ThreadPool* pool = HashPool();
  const size_t r = layout_.replica_begin();
  return {ChunkedXxh3(p, r, pool), ChunkedXxh3(p + r, end - r, pool)};
}

ThreadPool* Snapshot::HashPool() const {
  std::call_once(hash_pool_once_, [this] {
    auto n = ParamInt(Param::kProtectHashThreads);
    const int64_t threads = n.ok() ? std::clamp<int64_t>(*n, 1, 64) : 4;
    if (!n.ok()) RTFT_LOG(kWarn, kLogRuntime) << n.status() << "; checksumming with 4 threads";
    if (threads > 1)
      hash_pool_ = std::make_unique<ThreadPool>(static_cast<int>(threads - 1), "rtft-l1-hash");
  });
  return hash_pool_.get();
}

std::vector<uint64_t> Snapshot::CompleteSteps() const {
  std::vector<uint64_t> steps;
  for (uint64_t k = 0; k < 2; ++k) {
    const AreaHeader* h = header(k);
    if (h->magic == kAreaMagic && h->state == kComplete && h->step % 2 == k && Verify(h->step))
      steps.push_back(h->step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void Snapshot::Invalidate(uint64_t step) {
  std::atomic_thread_fence(std::memory_order_release);
  header(step)->state = kWriting;
  std::atomic_thread_fence(std::memory_order_release);
}

// The area's two checksums over bytes given in payload order: each byte goes to one of them,
// before the replica range or in it.
class AreaHasher {
 public:
  explicit AreaHasher(size_t replica_begin) : replica_begin_(replica_begin) {}
  void Update(const char* p, size_t n) {
    const size_t before = at_ < replica_begin_ ? std::min(n, replica_begin_ - at_) : 0;
    if (before > 0) head_.Update(p, before);
    if (n > before) replica_.Update(p + before, n - before);
    at_ += n;
  }
  AreaSums sums() const { return {head_.Digest(), replica_.Digest()}; }

 private:
  const size_t replica_begin_;
  size_t at_ = 0;
  ChunkedXxh3Hasher head_, replica_;
};

Status Snapshot::Capture(uint64_t step, uint64_t epoch, int rank, int world,
                         const std::string& objects, const void* stream,
                         const std::function<void()>& copied) {
  if (objects.size() > layout_.object_capacity)
    return Status::ResourceExhausted(
        "protected objects take " + std::to_string(objects.size()) + " bytes, more than the " +
        std::to_string(layout_.object_capacity) + " reserved (ProtectOptions::max_object_bytes)");
  FaultPoint("protect.l1_copy");  // on the capture worker, before it copies anything
  const auto begun = std::chrono::steady_clock::now();
  Invalidate(step);
  std::vector<std::unique_ptr<CopyTicket>> device;
  RTFT_RETURN_IF_ERROR(StartDeviceCopies(step, stream, &device));
  char* p = payload(step);
  ZeroGaps(p);
  AreaHasher hash(layout_.replica_begin());
  if (!device.empty()) {
    // The device copies run while the host tensors are copied; the whole area is hashed once
    // everything landed and `copied` has let the application go on, its chunks in parallel.
    for (const auto* list : {&layout_.replicated, &layout_.sharded})
      for (const Entry& e : *list)
        if (e.tensor.memory != MemoryKind::kDevice && e.bytes > 0 && !e.tensor.changed_in_compute)
          std::memcpy(p + e.offset, e.tensor.data, e.bytes);
    if (!objects.empty()) std::memcpy(p + layout_.objects_begin, objects.data(), objects.size());
    for (auto& t : device) RTFT_RETURN_IF_ERROR(t->Wait());
    const auto landed = std::chrono::steady_clock::now();
    if (copied) copied();
    FaultPoint("protect.l1_copied");  // the state may change from here
    const size_t end = layout_.objects_begin + objects.size();
    Close(step, epoch, rank, world, objects.size(), Sums(p, end));
    using Ms = std::chrono::duration<double, std::milli>;
    RTFT_LOG(kDebug, kLogRuntime) << "L1 step " << step << " at "
                                  << Ms(begun.time_since_epoch()).count() << " ms: copied in "
                                  << Ms(landed - begun).count() << " ms, hashed in "
                                  << Ms(std::chrono::steady_clock::now() - landed).count()
                                  << " ms (" << end / 1e6 << " MB)";
    return Status::Ok();
  }
  size_t at = 0;  // what is hashed so far: payload [0, at)
  // Copies `bytes` from `src` to payload offset `offset` (at or after `at`), hashing the padding
  // before it and then each piece right after it is copied (only hashing, where `src` is null:
  // a tensor CaptureEarly() copied).
  auto put = [&](size_t offset, const void* src, size_t bytes) {
    hash.Update(p + at, offset - at);
    for (size_t done = 0; done < bytes; done += kPiece) {
      const size_t n = std::min(kPiece, bytes - done);
      if (src) std::memcpy(p + offset + done, static_cast<const char*>(src) + done, n);
      hash.Update(p + offset + done, n);
    }
    at = offset + bytes;
  };
  for (const auto* list : {&layout_.replicated, &layout_.sharded})
    for (const Entry& e : *list)
      put(e.offset, e.tensor.changed_in_compute ? nullptr : e.tensor.data, e.bytes);
  put(layout_.objects_begin, objects.data(), objects.size());
  if (copied) copied();
  FaultPoint("protect.l1_copied");  // the state may change from here
  Close(step, epoch, rank, world, objects.size(), hash.sums());
  return Status::Ok();
}

void Snapshot::ZeroGaps(char* p) const {
  size_t at = 0;
  for (const auto* list : {&layout_.replicated, &layout_.sharded}) {
    for (const Entry& e : *list) {
      if (e.offset > at) std::memset(p + at, 0, e.offset - at);
      at = std::max(at, e.offset + e.bytes);
    }
  }
  if (layout_.objects_begin > at) std::memset(p + at, 0, layout_.objects_begin - at);
}

void Snapshot::Seal(uint64_t step, uint64_t epoch, int rank, int world, uint64_t object_bytes) {
  char* p = payload(step);
  ZeroGaps(p);
  Close(step, epoch, rank, world, object_bytes, Sums(p, layout_.objects_begin + object_bytes));
}

void Snapshot::Close(uint64_t step, uint64_t epoch, int rank, int world, uint64_t object_bytes,
                     const AreaSums& sums) {
  copied_bytes_.fetch_add(tensor_bytes_ + object_bytes, std::memory_order_relaxed);
  hashed_bytes_.fetch_add(layout_.objects_begin + object_bytes, std::memory_order_relaxed);
  AreaHeader* h = header(step);
  h->state = kWriting;
  h->magic = kAreaMagic;
  h->format = kFormat;
  h->layout_hash = layout_.hash;
  h->step = step;
  h->epoch = epoch;
  h->payload_bytes = layout_.payload_bytes;
  h->object_bytes = object_bytes;
  h->rank = rank;
  h->world = world;
  h->checksum = sums.compared;
  h->replica_checksum = sums.replica;
  std::atomic_thread_fence(std::memory_order_release);
  h->state = kComplete;
}

Status Snapshot::RestoreShared(uint64_t step, const Layout& target) const {
  if (!Verify(step))
    return Status::DataLoss("the L1 snapshot of step " + std::to_string(step) +
                            " is incomplete or damaged");
  if (target.replicated.size() != layout_.replicated.size() ||
      target.shard_begin != layout_.shard_begin)
    return Status::Internal("a layout whose replicated tensors differ from the snapshot's");
  const char* p = payload(step);
  for (size_t i = 0; i < target.replicated.size(); ++i) {
    const Entry& e = target.replicated[i];
    if (e.offset != layout_.replicated[i].offset || e.bytes != layout_.replicated[i].bytes)
      return Status::Internal("'" + e.tensor.name + "' is laid out apart from the snapshot's");
    RTFT_RETURN_IF_ERROR(Write(e, p + e.offset));
  }
  return DeserializeObjects(target.objects, p + layout_.objects_begin, header(step)->object_bytes);
}

Status Snapshot::Restore(uint64_t step, bool sharded) const {
  if (!Verify(step))
    return Status::DataLoss("the L1 snapshot of step " + std::to_string(step) +
                            " is incomplete or damaged");
  const char* p = payload(step);
  for (const auto* list : {&layout_.replicated, &layout_.sharded}) {
    if (list == &layout_.sharded && !sharded) break;
    for (const Entry& e : *list) RTFT_RETURN_IF_ERROR(Write(e, p + e.offset));
  }
  return DeserializeObjects(layout_.objects, p + layout_.objects_begin, header(step)->object_bytes);
}

}  // namespace rtft::protect
