#include "checkpoint/read/device_staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "core/check.h"
#include "core/params.h"

namespace rtft {
namespace {

// Copies in flight from each half of the buffer. Waited for on every way out of Stream, errors
// included: the buffer must not be refilled or freed while a copy still reads it.
struct InFlight {
  std::unique_ptr<CopyTicket> tickets[2];

  ~InFlight() {
    for (auto& t : tickets)
      if (t) (void)t->Wait();
  }
  Status Wait(int slot) {
    if (!tickets[slot]) return Status::Ok();
    Status s = tickets[slot]->Wait();
    tickets[slot].reset();
    return s;
  }
};

}  // namespace

StatusOr<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(uint64_t bytes, uint64_t min_bytes) {
  bytes = std::max({bytes, min_bytes, uint64_t{1}});
  // Anonymous pages: page-aligned, and not touched until used unless CUDA pins them.
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return Status::FromErrno(errno, "allocating " + FormatBytes(bytes) + " of restore staging");
  // One registration: every copy out of the buffer then lies inside it.
  const bool pinned = RegisterHostMemory(base, bytes, bytes);
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(static_cast<char*>(base), bytes, pinned));
}

DeviceStaging::~DeviceStaging() {
  if (pinned_) UnregisterHostMemory(base_, bytes_, bytes_);
  ::munmap(base_, bytes_);
}

Status DeviceStaging::Stream(const CheckpointFileReader& reader, const TensorEntry& entry,
                             bool verify, DeviceCopier* copier, void* dst) {
  const uint64_t chunk = reader.chunk_bytes();
  const uint64_t chunks = ChunkCount(entry.bytes, chunk);
  const uint64_t largest = std::min(chunk, entry.bytes);
  const int slots = bytes_ / 2 >= largest ? 2 : 1;
  const uint64_t slot_bytes = bytes_ / slots;
  RTFT_CHECK(largest <= slot_bytes);  // Create's min_bytes covers the largest chunk
  // Whole chunks per copy: fewer, larger copies when chunks are small.
  const uint64_t per_copy = std::max<uint64_t>(1, slot_bytes / chunk);
  InFlight in_flight;
  for (uint64_t first = 0, n = 0; first < chunks; first += per_copy, ++n) {
    const int slot = static_cast<int>(n % slots);
    char* buffer = base_ + slot * slot_bytes;
    Status waited = in_flight.Wait(slot);
    if (!waited.ok()) return waited.Annotate("copying tensor '" + entry.name + "' to the device");
    uint64_t filled = 0;
    for (uint64_t c = first; c < std::min(first + per_copy, chunks); ++c) {
      RTFT_RETURN_IF_ERROR(reader.ReadTensorChunk(entry, c, buffer + filled, verify));
      filled += reader.ChunkSize(entry, c);
    }
    if (filled == 0) continue;  // an empty tensor
    auto ticket = copier->CopyToDeviceAsync(static_cast<char*>(dst) + first * chunk, buffer,
                                            static_cast<size_t>(filled));
    if (!ticket.ok())
      return ticket.status().Annotate("copying tensor '" + entry.name + "' to the device");
    in_flight.tickets[slot] = std::move(ticket).value();
  }
  for (int slot = 0; slot < 2; ++slot) {
    Status waited = in_flight.Wait(slot);
    if (!waited.ok()) return waited.Annotate("copying tensor '" + entry.name + "' to the device");
  }
  return Status::Ok();
}

}  // namespace rtft
