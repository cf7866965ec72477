// The L1 snapshot's device side (issue "hot swap on GPUs", docs/protect.md "Levels"): device
// tensors are copied into the memory file on a copy stream of their device's, ordered after the
// application's stream, and back with host-to-device copies; the file's mapping is registered
// with CUDA once per mapping so that those copies run at the link's speed.
#include <algorithm>
#include <cstring>
#include <map>

#include "protect/snapshot.h"

namespace rtft::protect {
namespace {

// Registered in pieces: drivers refuse very large single registrations.
constexpr size_t kPinPiece = size_t{1} << 30;

// A copy must not cross from one registered piece into the next (CUDA refuses it with
// cudaErrorInvalidValue): `f(offset, bytes)` for each part of the `bytes` at `host` (inside the
// file mapped at `base`) that stays within one piece.
template <typename F>
Status ForEachPiece(const char* base, const char* host, size_t bytes, F f) {
  for (size_t done = 0; done < bytes;) {
    const size_t at = static_cast<size_t>(host + done - base);
    const size_t n = std::min(bytes - done, kPinPiece - at % kPinPiece);
    RTFT_RETURN_IF_ERROR(f(done, n));
    done += n;
  }
  return Status::Ok();
}

bool HasDeviceTensors(const Layout& l) {
  for (const auto* list : {&l.replicated, &l.sharded})
    for (const Entry& e : *list)
      if (e.tensor.memory == MemoryKind::kDevice) return true;
  return false;
}

bool HasChangedInCompute(const Layout& l) {
  for (const auto* list : {&l.replicated, &l.sharded})
    for (const Entry& e : *list)
      if (e.tensor.changed_in_compute && e.bytes > 0) return true;
  return false;
}

}  // namespace

Snapshot::~Snapshot() { Unpin(); }

Status Snapshot::Pin() {
  if (pinned_ || !HasDeviceTensors(layout_)) return Status::Ok();
  // Unregistered memory still works, at pageable speed: the engine logs it, recovery goes on.
  pinned_ = RegisterHostMemory(file_->data(), file_->size(), kPinPiece);
  return Status::Ok();
}

void Snapshot::Unpin() {
  if (!pinned_) return;
  UnregisterHostMemory(file_->data(), file_->size(), kPinPiece);
  pinned_ = false;
}

StatusOr<DeviceCopier*> Snapshot::Copier(int device) const {
  auto it = copiers_.find(device);
  if (it == copiers_.end()) {
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCopier> c, CreateDeviceCopier(device));
    it = copiers_.emplace(device, std::move(c)).first;
  }
  return it->second.get();
}

std::map<int, std::vector<CopyPiece>> Snapshot::DevicePieces(uint64_t step, bool early) const {
  std::map<int, std::vector<CopyPiece>> pieces;
  char* p = payload(step);
  for (const auto* list : {&layout_.replicated, &layout_.sharded})
    for (const Entry& e : *list)
      if (e.tensor.memory == MemoryKind::kDevice && e.bytes > 0 &&
          e.tensor.changed_in_compute == early) {
        char* host = p + e.offset;
        const char* device = static_cast<const char*>(e.tensor.data);
        std::vector<CopyPiece>& mine = pieces[e.tensor.device];
        (void)ForEachPiece(file_->data(), host, e.bytes, [&](size_t at, size_t n) {
          mine.push_back({host + at, device + at, n});
          return Status::Ok();
        });
      }
  return pieces;
}

Status Snapshot::StartDeviceCopies(uint64_t step, const void* stream,
                                   std::vector<std::unique_ptr<CopyTicket>>* tickets) const {
  for (const auto& [device, list] : DevicePieces(step, /*early=*/false)) {
    RTFT_ASSIGN_OR_RETURN(DeviceCopier * c, Copier(device));
    RTFT_RETURN_IF_ERROR(c->After(stream));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> t, c->CopyToHost(list));
    tickets->push_back(std::move(t));
  }
  return Status::Ok();
}

Status Snapshot::CaptureEarly(uint64_t step, const void* stream) {
  if (!HasChangedInCompute(layout_)) return Status::Ok();  // as cheap as the capture's own walk
  Invalidate(step);                                        // before its first byte changes
  char* p = payload(step);
  for (const auto* list : {&layout_.replicated, &layout_.sharded})
    for (const Entry& e : *list)
      if (e.tensor.changed_in_compute && e.tensor.memory != MemoryKind::kDevice && e.bytes > 0)
        std::memcpy(p + e.offset, e.tensor.data, e.bytes);
  // Compute's kernels are queued only once this returns: the copies end before any of them runs.
  std::vector<std::unique_ptr<CopyTicket>> tickets;
  for (const auto& [device, list] : DevicePieces(step, /*early=*/true)) {
    RTFT_ASSIGN_OR_RETURN(DeviceCopier * c, Copier(device));
    RTFT_RETURN_IF_ERROR(c->After(stream));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> t, c->CopyToHost(list));
    tickets.push_back(std::move(t));
  }
  for (auto& t : tickets) RTFT_RETURN_IF_ERROR(t->Wait());
  return Status::Ok();
}

Status Snapshot::Write(const Entry& e, const char* src) const {
  if (e.bytes == 0) return Status::Ok();
  if (e.tensor.memory != MemoryKind::kDevice) {
    std::memcpy(e.tensor.data, src, e.bytes);
    return Status::Ok();
  }
  RTFT_ASSIGN_OR_RETURN(DeviceCopier * c, Copier(e.tensor.device));
  char* device = static_cast<char*>(e.tensor.data);
  // `src` is in the file: the entry of some version.
  return ForEachPiece(file_->data(), src, e.bytes, [&](size_t at, size_t n) {
    return c->CopyToDevice(device + at, src + at, n)
        .Annotate("restoring '" + e.tensor.name + "' to device " + std::to_string(e.tensor.device));
  });
}

}  // namespace rtft::protect
