// The lazy asynchronous checkpoint engine (DataStates-LLM design). Checkpoint() returns at once;
// state is copied into a bounded pinned host pool while the caller keeps computing, and flushed
// to one HDF5 file per rank and version by several threads (io_uring + O_DIRECT where possible).
// WaitCaptured() is the fence before the optimizer update; WaitPersisted() waits for durability.
// Restore() reads a version back into host or device memory, resharding if the number of ranks
// changed. Files and their format: docs/format.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rtft/export.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

// Zero / empty fields take their defaults from the RTFT_CKPT_* settings (README, "Settings").
struct CheckpointOptions {
  std::string dir;  // checkpoint root; shared by all ranks
  int rank = 0;
  int world_size = 1;
  uint64_t pool_bytes = 0;                      // pinned host pool (RTFT_CKPT_POOL_BYTES)
  uint64_t chunk_bytes = 0;                     // capture/write unit (RTFT_CKPT_CHUNK_BYTES)
  int capture_threads = 0;                      // RTFT_CKPT_CAPTURE_THREADS
  int flush_threads = 0;                        // RTFT_CKPT_FLUSH_THREADS
  std::string io_backend;                       // auto | uring | posix (RTFT_CKPT_IO_BACKEND)
  int io_depth = 0;                             // RTFT_CKPT_IO_DEPTH
  std::optional<bool> direct_io;                // RTFT_CKPT_DIRECT_IO
  std::optional<int> keep_versions;             // RTFT_CKPT_KEEP_VERSIONS; 0 keeps all
  std::chrono::milliseconds commit_timeout{0};  // RTFT_CKPT_COMMIT_TIMEOUT_MS
  std::chrono::milliseconds wait_timeout{0};    // RTFT_CKPT_WAIT_TIMEOUT_MS
  // Register the pool with CUDA (page-locked, so device tensors are captured by DMA). A job
  // whose state is all in host memory sets false: then the engine never creates a CUDA context,
  // which on a GPU node costs device memory, start-up time and tens of milliseconds at exit.
  bool pin_pool = true;
  // Which write of a version this engine's files belong to (docs/format.md, "Commit"): the ranks
  // that write a version together pass the same nonzero id, and rank 0 commits only files that
  // carry it, never a file of the same version left by an earlier write (an earlier epoch of a
  // job that went back, a run that crashed). 0: any file of the version is taken.
  uint64_t write_id = 0;
};

// What one version cost; filled in as the version moves through the pipeline.
struct CheckpointStats {
  uint64_t version = 0;
  uint64_t tensor_bytes = 0;
  uint64_t object_bytes = 0;
  size_t tensors = 0;
  uint64_t early_bytes = 0;      // of tensor_bytes: copied inside Checkpoint() (changed_in_compute)
  double checkpoint_call_s = 0;  // time Checkpoint() held the caller
  double capture_s = 0;          // Checkpoint() call to last byte in the pool
  double persist_s = 0;          // Checkpoint() call to durable (file renamed, directory synced)
  double commit_s = 0;           // Checkpoint() call to LATEST moved (rank 0 only)
  bool direct_io = false;        // O_DIRECT was granted for the tensor bytes
  std::string io_backend;
};

// What the writer vouches for about a version's state, recorded in its manifests (docs/format.md,
// "Certification"): nothing by default. The Protector's L3 sets `checked` and `agreed` when the
// data-parallel copies of the replicated tensors were compared and agreed (docs/protect.md,
// "Silent data corruption").
struct VersionMarks {
  bool checked = false;   // the state's replicated copies were compared
  bool agreed = false;    // ... and every copy agreed (false when not checked)
  bool replayed = false;  // its step's compute was checked by a replay
};

class RTFT_EXPORT CheckpointEngine {
 public:
  static StatusOr<std::unique_ptr<CheckpointEngine>> Create(const CheckpointOptions& options);
  virtual ~CheckpointEngine();  // waits for versions in flight; errors are logged

  // Starts a lazy checkpoint of `state` as `version`. Versions must increase. Returns at once;
  // the memory that `state` describes must not change until WaitCaptured(version) returns, but
  // for the tensors marked changed_in_compute (a module's buffers that forward updates), which
  // are copied before it returns.
  // Fails at once on an invalid description or when an earlier version failed.
  virtual Status Checkpoint(uint64_t version, const StateProvider& state) = 0;
  // The same, with the marks every file of the version and its global manifest record (each
  // rank gives its own; the version is marked only where every rank's file is).
  virtual Status Checkpoint(uint64_t version, const StateProvider& state,
                            const VersionMarks& marks) = 0;
  // Blocks until every byte of `version` is in host memory (the fence before an update). Even
  // when the version failed, it returns only once no copy reads the state's memory any more.
  virtual Status WaitCaptured(uint64_t version) = 0;
  virtual Status WaitCaptured(uint64_t version, std::chrono::milliseconds timeout) = 0;
  // Blocks until `version` is durable; on rank 0 also until it is committed (LATEST moved).
  // Versions whose flushes overlap may complete in any order: an older version in flight may
  // still be incomplete when a newer one's wait returns (wait for each one that matters).
  virtual Status WaitPersisted(uint64_t version) = 0;
  virtual Status WaitPersisted(uint64_t version, std::chrono::milliseconds timeout) = 0;
  // The first background error, if any, without blocking.
  virtual Status PollError() = 0;
  // Gives up on committing the versions in flight: a commit that waits for other ranks' files
  // (one of them lost) ends at once with kAborted instead of at `commit_timeout`, so destroying
  // the engine does not wait for it. Files already being written are finished, and versions whose
  // files are all there are still committed, but none is pruned any more (a prune that runs ends
  // before Abandon returns): a recovery may restore any version on disk (docs/format.md).
  virtual void Abandon() = 0;
  virtual StatusOr<CheckpointStats> Stats(uint64_t version) = 0;
  virtual const CheckpointOptions& options() const = 0;
};

// ---- Reading checkpoints back --------------------------------------------------------------

struct VersionInfo {
  uint64_t version = 0;
  int world_size = 0;
  bool complete = false;  // its global manifest exists and names every rank's file
  std::string path;       // the version's directory
  VersionMarks marks;     // as its global manifest records them (complete versions)
};

// Every version directory under `dir`, oldest first, complete or not.
RTFT_EXPORT StatusOr<std::vector<VersionInfo>> ListVersions(const std::string& dir);
// The version LATEST points to; NotFound when nothing was committed yet.
RTFT_EXPORT StatusOr<uint64_t> LatestVersion(const std::string& dir);

struct RestoreOptions {
  std::optional<uint64_t> version;  // default: LATEST
  bool verify_checksums = true;
  // Host memory that device tensors stream through (pinned where CUDA is present), allocated
  // once per Restore(): whole chunks are read, checked and copied to the device at their offset,
  // reading the next chunk while the previous one is copied when two chunks fit. A chunk is never
  // split (its checksum covers all of it), so the buffer grows to the largest chunk streamed
  // (logged at info) when this is smaller. Device tensors that are resharded are instead
  // assembled whole in ordinary host memory and copied once.
  uint64_t staging_bytes = 256ull << 20;  // two halves of 128 MiB: reads overlap copies
  // Objects are per rank (each rank's file holds its own): an object is read from this rank's
  // file when the version has it, else from the lowest rank's that holds it. Unset: the lowest
  // rank's (objects every rank saves alike). A rank restoring its own state (an RNG's) sets it.
  std::optional<int> rank;
};

// Fills every tensor that `state` describes from the checkpoint: tensors with shard
// coordinates are assembled from whichever saved shards overlap them, so a state saved by N
// ranks restores into M ranks. Objects are handed to their deserializers. A tensor that is
// missing, has another dtype or shape, or fails its checksum is an error naming it.
RTFT_EXPORT Status Restore(const std::string& dir, const RestoreOptions& options,
                           const StateProvider& state);

struct VerifyProgress {
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  std::string current;  // file being checked
};

// Reads every file of a version and checks every checksum and the global manifest.
RTFT_EXPORT Status VerifyVersion(const std::string& dir, uint64_t version,
                                 const std::function<void(const VerifyProgress&)>& progress = {});

}  // namespace rtft
