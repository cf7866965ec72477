// The L1 snapshot's device side (issue "hot swap on GPUs", docs/protect.md "Levels"): device
// tensors are copied into the memory file on a copy stream of their device's, ordered after the
// application's stream, and back with host-to-device copies; the file's mapping is registered
// with CUDA once per mapping so that those copies run at the link's speed.
#include <cstring>

#include "protect/snapshot.h"

namespace rtft::protect {
namespace {

// Registered in pieces: drivers refuse very large single registrations.
constexpr size_t kPinPiece = size_t{1} << 30;

bool HasDeviceTensors(const Layout& l) {
  for (const auto* list : {&l.replicated, &l.sharded})
    for (const Entry& e : *list)
      if (e.tensor.memory == MemoryKind::kDevice) return true;
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

Status Snapshot::StartDeviceCopies(uint64_t step, const void* stream,
                                   std::vector<std::unique_ptr<CopyTicket>>* tickets) const {
  std::map<int, std::vector<CopyPiece>> pieces;
  char* p = payload(step);
  for (const auto* list : {&layout_.replicated, &layout_.sharded})
    for (const Entry& e : *list)
      if (e.tensor.memory == MemoryKind::kDevice && e.bytes > 0)
        pieces[e.tensor.device].push_back({p + e.offset, e.tensor.data, e.bytes});
  for (const auto& [device, list] : pieces) {
    RTFT_ASSIGN_OR_RETURN(DeviceCopier * c, Copier(device));
    RTFT_RETURN_IF_ERROR(c->After(stream));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> t, c->CopyToHost(list));
    tickets->push_back(std::move(t));
  }
  return Status::Ok();
}

Status Snapshot::Write(const Entry& e, const char* src) const {
  if (e.bytes == 0) return Status::Ok();
  if (e.tensor.memory != MemoryKind::kDevice) {
    std::memcpy(e.tensor.data, src, e.bytes);
    return Status::Ok();
  }
  RTFT_ASSIGN_OR_RETURN(DeviceCopier * c, Copier(e.tensor.device));
  return c->CopyToDevice(e.tensor.data, src, e.bytes)
      .Annotate("restoring '" + e.tensor.name + "' to device " + std::to_string(e.tensor.device));
}

}  // namespace rtft::protect
