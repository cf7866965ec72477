// The three ways `rtft-bench ckpt` writes the same state to the same disk:
//   raw   - the disk's own O_DIRECT bandwidth (io_uring via the project's IoBackend), the ceiling;
//   naive - what torch.save does: copy every tensor to fresh pageable memory, serialize into one
//           buffered stream, fsync; the caller is blocked for all of it;
//   rtft  - CheckpointEngine: the caller is blocked for Checkpoint() + WaitCaptured() only;
// then the restore phase reads rt-ft's version back (RunRestore).
#pragma once

#include <cstdint>
#include <string>

#include "bench/ckpt/ckpt_state.h"
#include "rtft/status.h"

namespace rtft::bench {

struct VariantConfig {
  std::string dir;           // scratch directory on the disk under test; files are removed after
  std::string io = "auto";   // rt-ft's I/O backend: auto | uring | posix
  uint64_t pool_bytes = 0;   // 0: big enough to hold the whole state
  bool engine_pool = false;  // the engine's own default pool (RTFT_CKPT_POOL_BYTES) instead
  int flush_threads = 0;     // 0: RTFT_CKPT_FLUSH_THREADS; also the raw writer's thread count
};

// Where RunRtft's version lives: `<dir>/rtft`, version 1, until RemoveTree.
std::string RtftDir(const VariantConfig& config);

struct VariantResult {
  double blocking_s = 0;  // how long the calling (training) thread was held
  double capture_s = 0;   // until every byte was in host memory; 0 where nothing is captured
  double persist_s = 0;   // until durable (fsync / rename + directory fsync)
  double call_s = 0;      // rtft only: the Checkpoint() call itself
  std::string io;         // backend that did the writing
  bool direct_io = false;
  uint64_t pool_bytes = 0;  // rtft only: the pinned pool it ran with
};

// Raw writes `bytes` (rounded up to 4 KiB) in 8 MiB blocks, 16 in flight per thread.
StatusOr<VariantResult> RunRaw(uint64_t bytes, const VariantConfig& config);
StatusOr<VariantResult> RunNaive(const BenchState& state, const VariantConfig& config);
// Leaves its version in RtftDir(config) for the restore phase.
StatusOr<VariantResult> RunRtft(const BenchState& state, const VariantConfig& config);

// The restore phase, on the version RunRtft wrote: the disk's raw O_DIRECT read bandwidth over
// the rank file, then Restore() into host memory, and (with a GPU) the raw read again and
// Restore() into device memory: each restore against the raw read right before it, so that the
// disk's drift over the phase is not in the ratio. Checksums verified and the restored bytes
// compared with the saved ones; the files are evicted from the page cache before each read
// (POSIX_FADV_DONTNEED, no root needed).
struct RestoreResult {
  uint64_t raw_read_bytes = 0;
  double raw_read_s = 0;         // before the restore into host memory
  double raw_read_device_s = 0;  // before the restore into device memory; 0 without a GPU
  double restore_s = 0;          // into host memory
  double restore_device_s = 0;   // into device memory; 0 without a usable GPU
  bool page_cache_evicted = false;
};
StatusOr<RestoreResult> RunRestore(const BenchState& saved, const VariantConfig& config, bool gpu);

}  // namespace rtft::bench
