// The restore phase of `rtft-bench ckpt`: how fast a restarted job gets its state back, against
// what the disk reads. Same state, same disk, same run as the write phase: the raw O_DIRECT read
// of rt-ft's own rank file (8 MiB blocks, 16 in flight per thread) right before each Restore() of
// that version, into host memory and into GPU memory, with every checksum verified; the page
// cache is emptied of the files before each read, so that every read comes from the disk.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"
#include "checkpoint/engine.h"
#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/naming.h"

namespace rtft::bench {
namespace {

constexpr uint64_t kBlockBytes = 8ull << 20;
constexpr size_t kDepth = 16;
constexpr uint64_t kVersion = 1;

// Drops the files' pages from the page cache (they are clean: the engine fsynced them), and the
// whole cache too where this process may (root). True when every file was evicted.
bool EvictFromPageCache(const std::string& dir) {
  (void)DropPageCache();
  bool all = true;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      all = false;
      continue;
    }
    all &= ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    ::close(fd);
  }
  return all && !ec;
}

// Reads the page-aligned part of `path` with O_DIRECT, `threads` threads interleaving 8 MiB
// blocks as RunRaw writes them; returns the bytes read.
StatusOr<uint64_t> RawRead(const std::string& path, int threads, double* seconds) {
  IoBackendOptions io_opts;
  io_opts.kind = "auto";
  io_opts.queue_depth = static_cast<int>(kDepth);
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> io, CreateIoBackend(io_opts));
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> probe,
                        io->Open(path, OpenOptions{OpenMode::kReadOnly, true}));
  RTFT_ASSIGN_OR_RETURN(uint64_t size, probe->Size());
  const uint64_t total = size / kDirectIoAlignment * kDirectIoAlignment;
  const uint64_t per_thread = kDepth * kBlockBytes;
  RTFT_ASSIGN_OR_RETURN(AlignedBuffer buffers, AlignedBuffer::Allocate(per_thread * threads, 3));
  std::vector<Status> results(static_cast<size_t>(threads));
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto f = io->Open(path, OpenOptions{OpenMode::kReadOnly, true});
      if (!f.ok()) {
        results[t] = f.status();
        return;
      }
      std::vector<IoRequest> reqs;
      size_t slot = 0;
      for (uint64_t at = static_cast<uint64_t>(t) * kBlockBytes; at < total;
           at += static_cast<uint64_t>(threads) * kBlockBytes) {
        char* buf = buffers.data() + t * per_thread + (slot++ % kDepth) * kBlockBytes;
        reqs.push_back(IoRequest{at, buf, static_cast<size_t>(std::min(kBlockBytes, total - at))});
      }
      results[t] = (*f)->Read(reqs);
    });
  }
  for (auto& w : workers) w.join();
  *seconds = SecondsSince(start);
  for (const Status& s : results) RTFT_RETURN_IF_ERROR(s);
  return total;
}

// The bytes of a state's tensor `i` in host memory.
StatusOr<std::vector<char>> HostCopy(const BenchState& state, size_t i) {
  const TensorDesc& t = state.tensors()[i];
  std::vector<char> bytes(t.bytes());
  if (t.memory == MemoryKind::kDevice) {
    RTFT_RETURN_IF_ERROR(GpuCopyToHost(bytes.data(), t.data, bytes.size()));
  } else {
    std::memcpy(bytes.data(), t.data, bytes.size());
  }
  return bytes;
}

Status CheckSame(const BenchState& saved, const BenchState& restored, const char* where) {
  for (size_t i = 0; i < saved.tensors().size(); ++i) {
    RTFT_ASSIGN_OR_RETURN(std::vector<char> a, HostCopy(saved, i));
    RTFT_ASSIGN_OR_RETURN(std::vector<char> b, HostCopy(restored, i));
    if (a != b)
      return Status::Internal(std::string("restore into ") + where + ": tensor " +
                              saved.tensors()[i].name + " differs from what was saved");
  }
  return Status::Ok();
}

// Restores the version into a fresh state like `saved`, in device memory or not; timed.
StatusOr<double> TimedRestore(const BenchState& saved, const std::string& dir, bool device,
                              bool* evicted) {
  StateSpec spec{saved.bytes(), saved.tensors().size(), device};
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<BenchState> target, BenchState::Create(spec));
  *evicted &= EvictFromPageCache(dir);
  RestoreOptions options;
  options.version = kVersion;
  options.verify_checksums = true;
  const auto start = Clock::now();
  RTFT_RETURN_IF_ERROR(Restore(dir, options, target->provider()));
  const double seconds = SecondsSince(start);
  RTFT_RETURN_IF_ERROR(CheckSame(saved, *target, device ? "GPU memory" : "host memory"));
  return seconds;
}

}  // namespace

StatusOr<RestoreResult> RunRestore(const BenchState& saved, const VariantConfig& config, bool gpu) {
  const std::string dir = RtftDir(config);
  CheckpointOptions o;
  o.dir = dir;
  o.flush_threads = config.flush_threads;
  RTFT_ASSIGN_OR_RETURN(CheckpointOptions resolved, ResolveCheckpointOptions(o));
  RestoreResult r;
  r.page_cache_evicted = true;
  // The raw read right before a restore, from the disk.
  auto raw_read = [&](double* seconds) {
    r.page_cache_evicted &= EvictFromPageCache(dir);
    return RawRead(RankFilePath(dir, kVersion, 0), std::max(1, resolved.flush_threads), seconds);
  };
  RTFT_ASSIGN_OR_RETURN(r.raw_read_bytes, raw_read(&r.raw_read_s));
  RTFT_ASSIGN_OR_RETURN(r.restore_s, TimedRestore(saved, dir, false, &r.page_cache_evicted));
  if (gpu) {
    RTFT_ASSIGN_OR_RETURN(uint64_t again, raw_read(&r.raw_read_device_s));
    if (again != r.raw_read_bytes)
      return Status::Internal("the rank file changed size between two raw reads");
    RTFT_ASSIGN_OR_RETURN(r.restore_device_s,
                          TimedRestore(saved, dir, true, &r.page_cache_evicted));
  }
  return r;
}

}  // namespace rtft::bench
