// The I/O backend interface: every byte of tensor data that the checkpoint engine writes or
// reads goes through it, so tests can inject faults (ENOSPC, short writes, failing fsync) at one
// seam. Backends: posix (pwrite/pread), uring (io_uring, batched), fault (wraps another).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft {

// O_DIRECT needs buffer address, file offset and length aligned to this.
constexpr size_t kDirectIoAlignment = 4096;

struct IoRequest {
  uint64_t offset = 0;  // file offset
  void* buffer = nullptr;
  size_t length = 0;
};

// Coalesced small tensors usually sit next to each other both in the pool span and in the file
// (the layout keeps datasets adjacent): one large write instead of many small ones. Requests
// merge only when both their file ranges and their buffers touch, so no byte outside a dataset
// is ever written.
void MergeAdjacent(std::vector<IoRequest>* requests);

// Large O_DIRECT writes go out as several requests, so an io_uring backend keeps many in flight
// from one flush thread (the disk's best depth), instead of one huge request at a time: each
// request of more than `max_bytes` becomes pieces of at most that.
void SplitLarge(std::vector<IoRequest>* requests, uint64_t max_bytes);
constexpr uint64_t kWriteRequestBytes = 8ull << 20;

enum class OpenMode {
  kCreate,     // create or truncate, read-write
  kReadWrite,  // must exist
  kReadOnly,   // must exist
};

// Every backend opens only regular files: a FIFO, device or directory in place of a checkpoint
// file is refused at once (it is opened non-blocking and checked with fstat on the descriptor that
// is then used, so nothing can swap the file in between), and so is a symbolic link unless
// `follow_symlinks` says the caller named that path itself.
struct OpenOptions {
  OpenMode mode = OpenMode::kReadOnly;
  // Ask for O_DIRECT. A file system that refuses it (tmpfs before Linux 6.6) falls back to
  // buffered I/O; File::direct() tells which one was granted.
  bool direct = false;
  // Files inside a checkpoint directory are never links; a path a user typed may be one.
  bool follow_symlinks = false;
};

class File {
 public:
  virtual ~File() = default;
  // Writes every request completely or fails; requests may complete in any order. With direct(),
  // requests must be aligned (kDirectIoAlignment): InvalidArgument otherwise.
  virtual Status Write(const std::vector<IoRequest>& requests) = 0;
  // Reads every request completely; reading past end of file is DataLoss (truncated file).
  virtual Status Read(const std::vector<IoRequest>& requests) = 0;
  // Sets the file's size (HDF5 extends a file over its early-allocated datasets this way).
  virtual Status Truncate(uint64_t size) = 0;
  virtual Status Sync() = 0;   // fdatasync
  virtual Status Close() = 0;  // idempotent; the destructor closes without reporting
  virtual StatusOr<uint64_t> Size() = 0;
  virtual bool direct() const = 0;
  virtual const std::string& path() const = 0;
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual const char* name() const = 0;
  virtual StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                               const OpenOptions& options) = 0;
  // A second, independent descriptor of the very file `file` has open (not of whatever its path
  // names now), e.g. with O_DIRECT for bulk reads beside a buffered one. Unimplemented where the
  // backend cannot.
  virtual StatusOr<std::unique_ptr<File>> Reopen(File& file, const OpenOptions& options) {
    return Status::Unimplemented(std::string("I/O backend ") + name() + " cannot reopen files");
  }
  // Atomic rename within one file system; replaces `to`.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // fsync of a directory, so that a rename or create in it is durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // mkdir -p.
  virtual Status CreateDirs(const std::string& dir) = 0;
  virtual Status Remove(const std::string& path) = 0;     // a file; NotFound if absent
  virtual Status RemoveAll(const std::string& path) = 0;  // a directory tree; OK if absent
};

struct IoBackendOptions {
  std::string kind = "auto";  // auto | uring | posix
  int queue_depth = 16;       // io_uring entries per ring
};

// `auto` picks io_uring when this build has it and the kernel allows it (probed once, logged),
// else posix. Asking for `uring` where it is unavailable is Unimplemented.
StatusOr<std::unique_ptr<IoBackend>> CreateIoBackend(const IoBackendOptions& options);

}  // namespace rtft
