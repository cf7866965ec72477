// The raw baseline: what the disk itself can take, measured the way a well-tuned writer would
// (O_DIRECT into a pre-sized file, 8 MiB blocks, 16 requests in flight per thread, several
// threads, one fsync).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_util.h"
#include "checkpoint/engine.h"
#include "checkpoint/io/io_backend.h"

namespace rtft::bench {
namespace {

constexpr uint64_t kBlockBytes = 8ull << 20;
constexpr size_t kDepth = 16;

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

StatusOr<int> WriterThreads(const VariantConfig& config) {
  CheckpointOptions o;
  o.dir = config.dir;
  o.flush_threads = config.flush_threads;
  RTFT_ASSIGN_OR_RETURN(CheckpointOptions resolved, ResolveCheckpointOptions(o));
  return std::max(1, resolved.flush_threads);
}

// Thread t writes blocks t, t+T, t+2T, ... so all threads stay near each other in the file, as
// the engine's flush threads do; one Write() call per thread keeps kDepth requests in flight.
std::vector<IoRequest> ThreadRequests(int t, int threads, uint64_t total, char* buffers) {
  std::vector<IoRequest> reqs;
  const uint64_t blocks = (total + kBlockBytes - 1) / kBlockBytes;
  size_t slot = 0;
  for (uint64_t b = static_cast<uint64_t>(t); b < blocks; b += static_cast<uint64_t>(threads)) {
    IoRequest r;
    r.offset = b * kBlockBytes;
    r.length = static_cast<size_t>(std::min(kBlockBytes, total - r.offset));
    r.buffer = buffers + (slot++ % kDepth) * kBlockBytes;
    reqs.push_back(r);
  }
  return reqs;
}

}  // namespace

StatusOr<VariantResult> RunRaw(uint64_t bytes, const VariantConfig& config) {
  const uint64_t total = RoundUp(std::max<uint64_t>(bytes, 1), kDirectIoAlignment);
  RTFT_ASSIGN_OR_RETURN(int threads, WriterThreads(config));
  IoBackendOptions io_opts;
  io_opts.kind = "auto";  // the disk's best: io_uring wherever this build and kernel allow it
  io_opts.queue_depth = static_cast<int>(kDepth);
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> io, CreateIoBackend(io_opts));
  // Each thread reuses kDepth blocks of its own; the memory is allocated and touched up front.
  const uint64_t per_thread = std::min<uint64_t>(kDepth * kBlockBytes, RoundUp(total, kBlockBytes));
  RTFT_ASSIGN_OR_RETURN(AlignedBuffer pool, AlignedBuffer::Allocate(per_thread * threads, 7));
  const std::string path = config.dir + "/raw.bin";

  const auto start = Clock::now();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                        io->Open(path, OpenOptions{OpenMode::kCreate, true}));
  // Sized up front, as the engine's HDF5 layout sizes its file before any data moves: ext4
  // serializes O_DIRECT writes that extend a file.
  if (::truncate(path.c_str(), static_cast<off_t>(total)) != 0)
    return Status::FromErrno(errno, "sizing " + path);
  std::vector<Status> results(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto f = io->Open(path, OpenOptions{OpenMode::kReadWrite, true});
      if (!f.ok()) {
        results[t] = f.status();
        return;
      }
      char* buffers = pool.data() + static_cast<uint64_t>(t) * per_thread;
      results[t] = (*f)->Write(ThreadRequests(t, threads, total, buffers));
      Status closed = (*f)->Close();
      if (results[t].ok()) results[t] = closed;
    });
  }
  for (auto& w : workers) w.join();
  for (const Status& s : results) RTFT_RETURN_IF_ERROR(s);
  RTFT_RETURN_IF_ERROR(file->Sync());
  VariantResult r;
  r.persist_s = r.blocking_s = SecondsSince(start);
  r.io = io->name();
  r.direct_io = file->direct();
  RTFT_RETURN_IF_ERROR(file->Close());
  RTFT_RETURN_IF_ERROR(io->Remove(path));
  return r;
}

}  // namespace rtft::bench
