// Local-file-system code shared by the posix and uring I/O backends: opening with O_DIRECT (and
// falling back where the file system refuses it), request checks, fdatasync/close/size, and the
// directory operations. Both backends derive from the classes here, so the only code that differs
// between them is how bytes move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft {

struct OpenedFd {
  int fd = -1;
  bool direct = false;  // O_DIRECT granted
};

// Opens `path` as `options` asks, only if it is a regular file (io_backend.h, OpenOptions): a
// FIFO, device, socket or directory is DataLoss when reading, FailedPrecondition when writing,
// and so is a symbolic link unless options.follow_symlinks. When O_DIRECT is requested and the
// file system refuses it (EINVAL, as tmpfs did before Linux 6.6), opens buffered instead and
// logs that once per process.
StatusOr<OpenedFd> OpenFd(const std::string& path, const OpenOptions& options);

// The DataLoss a read returns when the file ended before the request did.
Status TruncatedRead(const char* op, const std::string& path, uint64_t offset, size_t wanted,
                     size_t got);

// A File over a file descriptor; subclasses implement Write and Read.
class FdFile : public File {
 public:
  FdFile(std::string path, OpenedFd opened);
  ~FdFile() override;
  FdFile(const FdFile&) = delete;
  FdFile& operator=(const FdFile&) = delete;

  Status Truncate(uint64_t size) override;
  Status Sync() override;
  Status Close() override;
  StatusOr<uint64_t> Size() override;
  bool direct() const override { return direct_; }
  const std::string& path() const override { return path_; }

 protected:
  int fd() const { return fd_; }
  // FailedPrecondition after Close; InvalidArgument for a null buffer, or for an unaligned
  // request on a direct file (checked here so that no byte moves before the error).
  Status CheckRequests(const std::vector<IoRequest>& requests) const;

 private:
  std::string path_;
  int fd_;
  bool direct_;
};

// The directory operations of a backend over the local file system.
class LocalFsBackend : public IoBackend {
 public:
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Status CreateDirs(const std::string& dir) override;
  Status Remove(const std::string& path) override;
  // Succeeds when `path` does not exist, like rm -rf.
  Status RemoveAll(const std::string& path) override;
};

}  // namespace rtft
