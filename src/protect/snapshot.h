// The L1 snapshot: the rank's whole protected state, captured at the start of a step into one of
// two areas of a memory file (ping-pong: one complete version always survives a capture cut
// short), each area with a header and two XXH3 checksums (docs/protect.md, "Levels").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/capture/device_copy.h"
#include "core/thread_pool.h"
#include "protect/layout.h"
#include "protect/shm_file.h"

namespace rtft::protect {

// The sharded tensors whose sizes an L1 file records (Snapshot::Peek).
constexpr size_t kMaxRecordedShards = 256;

// An area's header: the first 4 KiB of the area.
struct AreaHeader {
  uint64_t magic;
  uint32_t format;
  uint32_t state;  // kEmpty, kWriting, kComplete
  uint64_t layout_hash;
  uint64_t step;
  uint64_t epoch;
  uint64_t payload_bytes;
  uint64_t object_bytes;  // serialized objects actually used
  // XXH3 of payload [0, compared_end): the replicated tensors that compute does not change,
  // which the cross-check compares and a peer feeds.
  uint64_t checksum;
  int32_t rank;
  int32_t world;
  // XXH3 of the rest, the L2 replica's range [replica_begin, objects_begin + object_bytes):
  // each byte is hashed once, in the capture's pass, and the replicator sends this one as it is.
  uint64_t replica_checksum;
};
// An area's two checksums, in payload order.
struct AreaSums {
  uint64_t compared = 0, replica = 0;
};
constexpr uint32_t kEmpty = 0, kWriting = 1, kComplete = 2;

class Snapshot {
 public:
  // Opens (or creates) <dir>/l1 for `layout`; complete areas of the same layout are kept.
  static StatusOr<std::unique_ptr<Snapshot>> Open(const std::string& dir, const Layout& layout);
  // What the L1 file in `dir` is laid out for, read without changing it: its layout's hash and
  // the bytes of each sharded tensor (empty when more than kMaxRecordedShards). nullopt when
  // there is no L1 file of this format there.
  struct FileLayout {
    uint64_t layout_hash = 0;
    std::vector<uint64_t> sharded_bytes;
  };
  static std::optional<FileLayout> Peek(const std::string& dir);

  // Steps whose snapshot is complete and checks out, newest first.
  std::vector<uint64_t> CompleteSteps() const;
  // The area of `step` (its parity) and its payload.
  AreaHeader* header(uint64_t step) const;
  char* payload(uint64_t step) const;

  // Capture: every tensor and then the objects (already serialized, so they are as at the call),
  // into the area of `step`, marked complete with its checksums at the end. A host tensor is
  // copied in pieces that stay in cache and each piece is hashed as it lands: one pass over the
  // state. Device tensors are copied to the area on a copy stream of their device's, once the
  // work queued on `stream` (the application's cudaStream_t; null: the default stream) is done,
  // all at once while the host tensors are copied; then `copied` runs (the state may change from
  // there on) and the area is hashed on the host, off the application's path (host tensors are
  // then copied without hashing: one pass to copy, one to hash, after the copies). Without
  // device tensors `copied` runs at the end.
  // Tensors that compute changes (TensorDesc::changed_in_compute) are not copied there: they
  // were by CaptureEarly(), and are only hashed.
  Status Capture(uint64_t step, uint64_t epoch, int rank, int world, const std::string& objects,
                 const void* stream = nullptr, const std::function<void()>& copied = nullptr);
  // Copies the tensors that compute changes into the area of `step` (marked incomplete first),
  // on the calling thread, before the step's compute runs: host ones at once, device ones once
  // the work queued on `stream` is done, waiting for their copy. Nothing when there are none.
  Status CaptureEarly(uint64_t step, const void* stream);
  // Marks the area of `step` complete after its payload was filled from elsewhere (a peer).
  void Seal(uint64_t step, uint64_t epoch, int rank, int world, uint64_t object_bytes);
  // Copies the snapshot of `step` back into the live tensors and objects (the sharded tensors
  // too unless `sharded` is false: after a shrink they are redistributed instead).
  Status Restore(uint64_t step, bool sharded = true) const;
  // The replicated tensors and the objects of `step` into `target`'s (a shrink's new layout,
  // whose replicated part must be laid out as this snapshot's).
  Status RestoreShared(uint64_t step, const Layout& target) const;
  // The file laid out again for another layout (a shrink's new shard sizes): both areas empty.
  Status Relayout(const std::string& dir, const Layout& layout);
  // Verifies the checksum of `step`'s area.
  bool Verify(uint64_t step) const;
  void Invalidate(uint64_t step);

  const Layout& layout() const { return layout_; }
  // What this snapshot's captures and checks moved through host memory since it was opened (a
  // relayout keeps counting): the bytes written into areas (tensors and objects; a host tensor's
  // copy reads as many from the application's memory) and the bytes read by checksums (each
  // capture's seal and each Verify).
  uint64_t copied_bytes() const { return copied_bytes_.load(std::memory_order_relaxed); }
  uint64_t hashed_bytes() const { return hashed_bytes_.load(std::memory_order_relaxed); }
  ~Snapshot();

 private:
  Snapshot(const Layout& layout) : layout_(layout), tensor_bytes_(TensorBytes(layout)) {}
  // The bytes of the layout's tensors (what a capture copies besides the objects).
  static uint64_t TensorBytes(const Layout& layout);
  // snapshot_device.cc: what device tensors need. The file's mapping is registered with CUDA
  // (page-locked, in pieces) while the layout has device tensors, once per mapping, never per step.
  Status Pin();
  void Unpin();
  StatusOr<DeviceCopier*> Copier(int device) const;
  // The pieces of the device tensors that compute changes (`early`) or of the others, by device.
  std::map<int, std::vector<CopyPiece>> DevicePieces(uint64_t step, bool early) const;
  // Starts the copies of every device tensor but those CaptureEarly() copies into the area of
  // `step`; one ticket per device.
  Status StartDeviceCopies(uint64_t step, const void* stream,
                           std::vector<std::unique_ptr<CopyTicket>>* tickets) const;
  // Copies `bytes` at `src` (an area) into `e`'s tensor, host or device.
  Status Write(const Entry& e, const char* src) const;
  size_t area_bytes() const { return kAlign + layout_.payload_bytes; }
  // Writes the header of `step`'s area and marks it complete, last.
  // Zeroes the alignment gaps between the entries of an area: its bytes outside the tensors are
  // then the same on every rank, so that the replicated tensors' checksum compares their
  // copies (docs/protect.md, "Silent data corruption") whatever the memory held before (a shrink
  // lays areas out again over old bytes).
  void ZeroGaps(char* p) const;
  void Close(uint64_t step, uint64_t epoch, int rank, int world, uint64_t object_bytes,
             const AreaSums& sums);
  // The two checksums of the payload `p` whose objects end at `end`, its chunks over the pool.
  AreaSums Sums(const char* p, size_t end) const;

  // The threads that checksum large areas (RTFT_PROTECT_HASH_THREADS, the caller one of them;
  // null when that is 1), made on first use.
  ThreadPool* HashPool() const;

  Layout layout_;
  uint64_t tensor_bytes_ = 0;  // TensorBytes(layout_), for the traffic counters
  std::unique_ptr<ShmFile> file_;
  mutable std::atomic<uint64_t> copied_bytes_{0}, hashed_bytes_{0};
  mutable std::once_flag hash_pool_once_;
  mutable std::unique_ptr<ThreadPool> hash_pool_;
  bool pinned_ = false;
  mutable std::map<int, std::unique_ptr<DeviceCopier>> copiers_;  // by device ordinal
};

}  // namespace rtft::protect
