#include "checkpoint/read/device_staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

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

namespace {

// What Stream does to one tensor: `groups` copies of up to `per_copy` whole chunks each.
struct Plan {
  const CheckpointFileReader* reader;
  const TensorEntry* entry;
  bool verify;
  DeviceCopier* copier;
  char* dst;
  uint64_t chunk;
  uint64_t chunks;
  uint64_t per_copy;

  uint64_t groups() const { return (chunks + per_copy - 1) / per_copy; }
  uint64_t First(uint64_t g) const { return g * per_copy; }
  uint64_t End(uint64_t g) const { return std::min(First(g) + per_copy, chunks); }

  // Reads group `g` into `buffer`, unchecked; returns its bytes.
  StatusOr<uint64_t> Read(uint64_t g, char* buffer) const {
    uint64_t filled = 0;
    for (uint64_t c = First(g); c < End(g); ++c) {
      RTFT_RETURN_IF_ERROR(reader->ReadTensorChunk(*entry, c, buffer + filled, false));
      filled += reader->ChunkSize(*entry, c);
    }
    return filled;
  }
  Status Check(uint64_t g, const char* buffer) const {
    uint64_t at = 0;
    for (uint64_t c = First(g); verify && c < End(g); ++c) {
      RTFT_RETURN_IF_ERROR(reader->CheckChunk(*entry, c, buffer + at));
      at += reader->ChunkSize(*entry, c);
    }
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<CopyTicket>> Copy(uint64_t g, const char* buffer, uint64_t bytes) const {
    auto ticket = copier->CopyToDeviceAsync(dst + First(g) * chunk, buffer, bytes);
    if (!ticket.ok())
      return ticket.status().Annotate("copying tensor '" + entry->name + "' to the device");
    return ticket;
  }
};

Status Copied(const Status& waited, const Plan& p) {
  return waited.Annotate("copying tensor '" + p.entry->name + "' to the device");
}

// One half of the buffer: reads and copies take turns.
Status StreamInTurn(const Plan& p, char* buffer) {
  InFlight in_flight;
  for (uint64_t g = 0; g < p.groups(); ++g) {
    Status waited = in_flight.Wait(0);
    if (!waited.ok()) return Copied(waited, p);
    RTFT_ASSIGN_OR_RETURN(uint64_t bytes, p.Read(g, buffer));
    RTFT_RETURN_IF_ERROR(p.Check(g, buffer));
    if (bytes == 0) continue;  // an empty tensor
    RTFT_ASSIGN_OR_RETURN(in_flight.tickets[0], p.Copy(g, buffer, bytes));
  }
  Status waited = in_flight.Wait(0);
  return waited.ok() ? waited : Copied(waited, p);
}

// Two halves: a reader thread fills one half (once its last copy to the device is done) while
// this thread checks the other half's chunks and starts its copy, so the disk is read without a
// pause for checksums or copies. Copies leave in order; a damaged chunk is never copied.
Status StreamOverlapped(const Plan& p, char* halves[2]) {
  struct Half {
    std::unique_ptr<CopyTicket> ticket;  // the copy out of it, once started
    bool filled = false;
    uint64_t bytes = 0;
    Status read;
  };
  Half half[2];
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread reader([&] {
    for (uint64_t g = 0; g < p.groups(); ++g) {
      Half& h = half[g % 2];
      std::unique_ptr<CopyTicket> previous;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !h.filled; });
        if (stop) return;
        previous = std::move(h.ticket);
      }
      Status read = previous ? Copied(previous->Wait(), p) : Status::Ok();
      StatusOr<uint64_t> bytes = read.ok() ? p.Read(g, halves[g % 2]) : read;
      {
        std::lock_guard<std::mutex> lock(mu);
        h.filled = true;
        h.bytes = bytes.ok() ? *bytes : 0;
        h.read = bytes.status();
      }
      cv.notify_all();
      if (!bytes.ok()) return;
    }
  });
  Status result;
  for (uint64_t g = 0; g < p.groups() && result.ok(); ++g) {
    Half& h = half[g % 2];
    uint64_t bytes = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return h.filled; });
      result = h.read;
      bytes = h.bytes;
    }
    std::unique_ptr<CopyTicket> ticket;
    if (result.ok()) result = p.Check(g, halves[g % 2]);
    if (result.ok() && bytes > 0) {
      auto copy = p.Copy(g, halves[g % 2], bytes);
      if (copy.ok()) ticket = std::move(copy).value();
      result = copy.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      h.ticket = std::move(ticket);
      h.filled = false;
      stop = !result.ok();
    }
    cv.notify_all();
  }
  reader.join();
  // Every copy still running reads from the buffer: wait for each before returning.
  for (Half& h : half) {
    if (!h.ticket) continue;
    Status waited = h.ticket->Wait();
    if (result.ok() && !waited.ok()) result = Copied(waited, p);
  }
  return result;
}

}  // namespace

Status DeviceStaging::Stream(const CheckpointFileReader& reader, const TensorEntry& entry,
                             bool verify, DeviceCopier* copier, void* dst) {
  const uint64_t chunk = reader.chunk_bytes();
  const uint64_t largest = std::min(chunk, entry.bytes);
  const int slots = bytes_ / 2 >= largest ? 2 : 1;
  const uint64_t slot_bytes = bytes_ / slots;
  RTFT_CHECK(largest <= slot_bytes);  // Create's min_bytes covers the largest chunk
  Plan p{&reader, &entry, verify, copier, static_cast<char*>(dst), chunk,
         ChunkCount(entry.bytes, chunk),
         // Whole chunks per copy: fewer, larger copies when chunks are small.
         std::max<uint64_t>(1, slot_bytes / chunk)};
  if (slots == 1) return StreamInTurn(p, base_);
  char* halves[2] = {base_, base_ + slot_bytes};
  return StreamOverlapped(p, halves);
}

}  // namespace rtft
