#include "checkpoint/read/device_staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread.h"

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

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

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

// What Stream does: the items' chunks in groups, each group up to a half of whole chunks of one
// item, numbered across the items so that the pipeline runs from the first item to the last.
struct Plan {
  struct Group {
    const DeviceStaging::Item* item;
    uint64_t first, end;  // its chunks [first, end) of the item
  };
  std::vector<Group> list;
  bool verify;

  Plan(const std::vector<DeviceStaging::Item>& items, uint64_t slot_bytes, bool verify)
      : verify(verify) {
    for (const DeviceStaging::Item& item : items) {
      const uint64_t chunk = item.reader->chunk_bytes();
      const uint64_t chunks = ChunkCount(item.entry->bytes, chunk);
      // Whole chunks per copy: fewer, larger copies when chunks are small.
      const uint64_t per_copy = std::max<uint64_t>(1, slot_bytes / chunk);
      for (uint64_t c = 0; c < chunks; c += per_copy)
        list.push_back(Group{&item, c, std::min(c + per_copy, chunks)});
    }
  }
  uint64_t groups() const { return list.size(); }
  const std::string& Name(uint64_t g) const { return list[g].item->entry->name; }

  // Reads group `g` into `buffer`, unchecked; returns its bytes. The group's chunks are one
  // range of the file, read in one request list: its pieces stay in flight together instead of
  // the disk's queue emptying at every chunk's end. Checked chunk by chunk in Check.
  StatusOr<uint64_t> Read(uint64_t g, char* buffer) const {
    const Group& x = list[g];
    const CheckpointFileReader& reader = *x.item->reader;
    const uint64_t begin = x.first * reader.chunk_bytes();
    const uint64_t bytes = std::min(x.end * reader.chunk_bytes(), x.item->entry->bytes) - begin;
    if (bytes > 0)
      RTFT_RETURN_IF_ERROR(reader.ReadTensorBytes(*x.item->entry, begin, buffer, bytes));
    return bytes;
  }
  Status Check(uint64_t g, const char* buffer) const {
    const Group& x = list[g];
    uint64_t at = 0;
    for (uint64_t c = x.first; verify && c < x.end; ++c) {
      RTFT_RETURN_IF_ERROR(x.item->reader->CheckChunk(*x.item->entry, c, buffer + at));
      at += x.item->reader->ChunkSize(*x.item->entry, c);
    }
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<CopyTicket>> Copy(uint64_t g, const char* buffer, uint64_t bytes) const {
    const Group& x = list[g];
    char* dst = static_cast<char*>(x.item->dst) + x.first * x.item->reader->chunk_bytes();
    auto ticket = x.item->copier->CopyToDeviceAsync(dst, buffer, bytes);
    if (!ticket.ok())
      return ticket.status().Annotate("copying tensor '" + Name(g) + "' to the device");
    return ticket;
  }
};

Status Copied(const Status& waited, const Plan& p, uint64_t g) {
  return waited.Annotate("copying tensor '" + p.Name(g) + "' to the device");
}

// One half of the buffer: reads and copies take turns.
Status StreamInTurn(const Plan& p, char* buffer) {
  InFlight in_flight;
  uint64_t copying = 0;  // the group of the copy in flight
  for (uint64_t g = 0; g < p.groups(); ++g) {
    Status waited = in_flight.Wait(0);
    if (!waited.ok()) return Copied(waited, p, copying);
    RTFT_ASSIGN_OR_RETURN(uint64_t bytes, p.Read(g, buffer));
    RTFT_RETURN_IF_ERROR(p.Check(g, buffer));
    if (bytes == 0) continue;  // an empty tensor
    RTFT_ASSIGN_OR_RETURN(in_flight.tickets[0], p.Copy(g, buffer, bytes));
    copying = g;
  }
  Status waited = in_flight.Wait(0);
  return waited.ok() ? waited : Copied(waited, p, copying);
}

// Two halves: a reader thread fills one half (once its last copy to the device is done) while
// this thread checks the other half's chunks and starts its copy, so the disk is read without a
// pause for checksums or copies. Copies leave in order; a damaged chunk is never copied.
Status StreamOverlapped(const Plan& p, char* halves[2]) {
  struct Half {
    std::unique_ptr<CopyTicket> ticket;  // the copy out of it, once started
    uint64_t group = 0;                  // the group that copy carries
    bool filled = false;
    uint64_t bytes = 0;
    Status read;
  };
  Half half[2];
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  // Where the time goes, for the debug log: a disk-bound restore reads nearly all the time.
  double read_s = 0, reader_waited_s = 0, checked_s = 0;
  uint64_t read_bytes = 0;
  const auto began = Clock::now();
  // The reader's loop; anything it throws ends it with a group that reads as failed, so the
  // loop below never waits for a half that will not come.
  auto read_all = [&] {
    for (uint64_t g = 0; g < p.groups(); ++g) {
      Half& h = half[g % 2];
      std::unique_ptr<CopyTicket> previous;
      uint64_t previous_group = 0;
      const auto waiting = Clock::now();
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !h.filled; });
        if (stop) return;
        previous = std::move(h.ticket);
        previous_group = h.group;
      }
      Status read = previous ? Copied(previous->Wait(), p, previous_group) : Status::Ok();
      const auto reading = Clock::now();
      reader_waited_s += std::chrono::duration<double>(reading - waiting).count();
      StatusOr<uint64_t> bytes = read.ok() ? p.Read(g, halves[g % 2]) : read;
      read_s += Seconds(reading);
      if (bytes.ok()) read_bytes += *bytes;
      {
        std::lock_guard<std::mutex> lock(mu);
        h.filled = true;
        h.bytes = bytes.ok() ? *bytes : 0;
        h.read = bytes.status();
      }
      cv.notify_all();
      if (!bytes.ok()) return;
    }
  };
  RTFT_ASSIGN_OR_RETURN(Thread reader, Thread::Start("rtft-h2d-read", [&] {
                          const Status s = RunGuarded("the restore's reader", read_all);
                          if (s.ok()) return;
                          {
                            std::lock_guard<std::mutex> lock(mu);
                            for (Half& h : half) {
                              if (h.filled) continue;
                              h.filled = true;
                              h.bytes = 0;
                              h.read = s;
                            }
                          }
                          cv.notify_all();
                        }));
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
    const auto checking = Clock::now();
    if (result.ok()) result = p.Check(g, halves[g % 2]);
    checked_s += Seconds(checking);
    if (result.ok() && bytes > 0) {
      auto copy = p.Copy(g, halves[g % 2], bytes);
      if (copy.ok()) ticket = std::move(copy).value();
      result = copy.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      h.ticket = std::move(ticket);
      h.group = g;
      h.filled = false;
      stop = !result.ok();
    }
    cv.notify_all();
  }
  reader.Join();
  // Every copy still running reads from the buffer: wait for each before returning.
  for (Half& h : half) {
    if (!h.ticket) continue;
    Status waited = h.ticket->Wait();
    if (result.ok() && !waited.ok()) result = Copied(waited, p, h.group);
  }
  const double total_s = Seconds(began);
  RTFT_LOG(kDebug, kLogCkpt) << "restore staging: " << p.groups() << " groups, "
                             << FormatBytes(read_bytes) << " in " << total_s << " s; reading "
                             << read_s << " s ("
                             << (read_s > 0 ? static_cast<double>(read_bytes) / read_s / 1e9 : 0)
                             << " GB/s), the reader waiting for a half " << reader_waited_s
                             << " s, checksums " << checked_s << " s";
  return result;
}

}  // namespace

Status DeviceStaging::Stream(const std::vector<Item>& items, bool verify) {
  uint64_t largest = 0;
  for (const Item& item : items)
    largest = std::max(largest, std::min(item.reader->chunk_bytes(), item.entry->bytes));
  const int slots = bytes_ / 2 >= largest ? 2 : 1;
  const uint64_t slot_bytes = bytes_ / slots;
  RTFT_CHECK(largest <= slot_bytes);  // Create's min_bytes covers the largest chunk
  const Plan p(items, slot_bytes, verify);
  if (slots == 1) return StreamInTurn(p, base_);
  char* halves[2] = {base_, base_ + slot_bytes};
  return StreamOverlapped(p, halves);
}

}  // namespace rtft
