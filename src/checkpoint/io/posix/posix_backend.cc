#include "checkpoint/io/posix/posix_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "checkpoint/io/fs_util.h"

namespace rtft {
namespace {

// Linux moves at most ~2 GiB per call anyway; asking for less keeps ssize_t arithmetic obvious.
constexpr size_t kMaxTransfer = size_t{1} << 30;

std::string At(const char* op, const std::string& path, uint64_t offset) {
  return std::string(op) + " " + path + " at offset " + std::to_string(offset);
}

class PosixFile final : public FdFile {
 public:
  using FdFile::FdFile;

  Status Write(const std::vector<IoRequest>& requests) override {
    RTFT_RETURN_IF_ERROR(CheckRequests(requests));
    for (const IoRequest& r : requests) RTFT_RETURN_IF_ERROR(WriteOne(r));
    return Status::Ok();
  }

  Status Read(const std::vector<IoRequest>& requests) override {
    RTFT_RETURN_IF_ERROR(CheckRequests(requests));
    for (const IoRequest& r : requests) RTFT_RETURN_IF_ERROR(ReadOne(r));
    return Status::Ok();
  }

 private:
  // A short write is continued where it stopped; the next call reports the error (ENOSPC) that
  // caused it.
  Status WriteOne(const IoRequest& r) {
    const char* p = static_cast<const char*>(r.buffer);
    size_t done = 0;
    while (done < r.length) {
      uint64_t offset = r.offset + done;
      ssize_t n = ::pwrite(fd(), p + done, std::min(r.length - done, kMaxTransfer), offset);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, At("pwrite", path(), offset));
      }
      if (n == 0) return Status::IoError(At("pwrite", path(), offset) + ": wrote 0 bytes");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status ReadOne(const IoRequest& r) {
    char* p = static_cast<char*>(r.buffer);
    size_t done = 0;
    while (done < r.length) {
      uint64_t offset = r.offset + done;
      ssize_t n = ::pread(fd(), p + done, std::min(r.length - done, kMaxTransfer), offset);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, At("pread", path(), offset));
      }
      if (n == 0) return TruncatedRead("pread", path(), r.offset, r.length, done);
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }
};

class PosixBackend final : public LocalFsBackend {
 public:
  const char* name() const override { return "posix"; }

  StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                       const OpenOptions& options) override {
    RTFT_ASSIGN_OR_RETURN(OpenedFd opened, OpenFd(path, options));
    return std::unique_ptr<File>(new PosixFile(path, opened));
  }

  StatusOr<std::unique_ptr<File>> Reopen(File& file, const OpenOptions& options) override {
    RTFT_ASSIGN_OR_RETURN(OpenedFd opened, ReopenFd(file, options));
    return std::unique_ptr<File>(new PosixFile(file.path(), opened));
  }
};

}  // namespace

StatusOr<std::unique_ptr<IoBackend>> CreatePosixBackend(const IoBackendOptions& options) {
  return std::unique_ptr<IoBackend>(new PosixBackend());
}

}  // namespace rtft
