#include "checkpoint/io/fs_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/logging.h"

namespace rtft {
namespace {

int OpenFlags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kCreate:
      return O_RDWR | O_CREAT | O_TRUNC;
    case OpenMode::kReadWrite:
      return O_RDWR;
    case OpenMode::kReadOnly:
      return O_RDONLY;
  }
  return O_RDONLY;
}

bool Aligned(uint64_t value) { return value % kDirectIoAlignment == 0; }

// std::filesystem reports errors through error_code, but may still throw bad_alloc.
template <typename Fn>
Status FsCall(const std::string& what, Fn fn) {
  std::error_code ec;
  try {
    fn(ec);
  } catch (const std::exception& e) {
    return Status::Internal(what + ": " + e.what());
  }
  if (ec) return Status::FromErrno(ec.value(), what);
  return Status::Ok();
}

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Whatever is at `path` may belong to someone else: a checkpoint file is a regular file, and a
// refused one is damage to a reader, a misconfiguration to a writer.
Status NotARegularFile(const std::string& path, const OpenOptions& options, const char* kind) {
  std::string what = path + " is " + kind + ", not a regular file";
  if (options.mode == OpenMode::kReadOnly) return Status::DataLoss(what);
  return Status::FailedPrecondition(what);
}

// `open_errno` receives open(2)'s errno when the open itself fails, 0 otherwise.
StatusOr<int> OpenChecked(const std::string& path, const OpenOptions& options, int flags,
                          int* open_errno) {
  *open_errno = 0;
  // Non-blocking, so that opening a FIFO does not wait for a writer; the flag is cleared again
  // below (io_uring would otherwise answer EAGAIN for regular files too).
  flags |= O_CLOEXEC | O_NONBLOCK | (options.follow_symlinks ? 0 : O_NOFOLLOW);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    *open_errno = errno;
    if (errno == ELOOP && !options.follow_symlinks)
      return NotARegularFile(path, options, "a symbolic link");
    return Status::FromErrno(errno, std::string("open ") + path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Status::FromErrno(errno, "fstat " + path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotARegularFile(path, options, FileKind(st.st_mode));
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    Status s = Status::FromErrno(errno, "fcntl " + path);
    ::close(fd);
    return s;
  }
  return fd;
}

}  // namespace

StatusOr<OpenedFd> OpenFd(const std::string& path, const OpenOptions& options) {
  const int flags = OpenFlags(options.mode);
  if (options.direct) {
    int err = 0;
    StatusOr<int> fd = OpenChecked(path, options, flags | O_DIRECT, &err);
    if (fd.ok()) return OpenedFd{*fd, true};
    if (err != EINVAL) return fd.status().Annotate("with O_DIRECT");
    // Once per process: the same file system will refuse it for every file of every version.
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      RTFT_LOG(kInfo, kLogIo)
          << "the file system of " << path
          << " refuses O_DIRECT; using buffered I/O where it does (logged once)";
    }
  }
  int err = 0;
  RTFT_ASSIGN_OR_RETURN(int fd, OpenChecked(path, options, flags, &err));
  return OpenedFd{fd, false};
}

Status TruncatedRead(const char* op, const std::string& path, uint64_t offset, size_t wanted,
                     size_t got) {
  return Status::DataLoss(std::string(op) + " " + path + " at offset " + std::to_string(offset) +
                          ": file truncated (wanted " + std::to_string(wanted) + " bytes, got " +
                          std::to_string(got) + ")");
}

FdFile::FdFile(std::string path, OpenedFd opened)
    : path_(std::move(path)), fd_(opened.fd), direct_(opened.direct) {}

FdFile::~FdFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status FdFile::Sync() {
  if (fd_ < 0) return Status::FailedPrecondition("fdatasync " + path_ + ": file is closed");
  while (::fdatasync(fd_) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "fdatasync " + path_);
  }
  return Status::Ok();
}

Status FdFile::Truncate(uint64_t size) {
  if (fd_ < 0) return Status::FailedPrecondition("ftruncate " + path_ + ": file is closed");
  while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "ftruncate " + path_);
  }
  return Status::Ok();
}

Status FdFile::Close() {
  if (fd_ < 0) return Status::Ok();
  int fd = std::exchange(fd_, -1);
  // Linux releases the descriptor even when close fails, so it is never retried.
  if (::close(fd) != 0 && errno != EINTR) return Status::FromErrno(errno, "close " + path_);
  return Status::Ok();
}

StatusOr<uint64_t> FdFile::Size() {
  if (fd_ < 0) return Status::FailedPrecondition("fstat " + path_ + ": file is closed");
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
  return static_cast<uint64_t>(st.st_size);
}

Status FdFile::CheckRequests(const std::vector<IoRequest>& requests) const {
  if (fd_ < 0) return Status::FailedPrecondition(path_ + " is closed");
  for (const IoRequest& r : requests) {
    if (r.length == 0) continue;
    if (r.buffer == nullptr) {
      return Status::InvalidArgument("null buffer for " + path_ + " at offset " +
                                     std::to_string(r.offset));
    }
    if (direct_ && !(Aligned(r.offset) && Aligned(r.length) &&
                     Aligned(reinterpret_cast<uintptr_t>(r.buffer)))) {
      char addr[32];
      std::snprintf(addr, sizeof(addr), "%p", r.buffer);
      return Status::InvalidArgument(
          "unaligned O_DIRECT request on " + path_ + ": offset " + std::to_string(r.offset) +
          ", length " + std::to_string(r.length) + ", buffer " + addr +
          " (each must be a multiple of " + std::to_string(kDirectIoAlignment) + ")");
    }
  }
  return Status::Ok();
}

Status LocalFsBackend::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + from + " to " + to);
  }
  return Status::Ok();
}

Status LocalFsBackend::SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open directory " + dir);
  Status status;
  while (::fsync(fd) != 0) {
    if (errno != EINTR) {
      status = Status::FromErrno(errno, "fsync directory " + dir);
      break;
    }
  }
  ::close(fd);
  return status;
}

Status LocalFsBackend::CreateDirs(const std::string& dir) {
  return FsCall("mkdir -p " + dir, [&](std::error_code& ec) {
    std::filesystem::create_directories(dir, ec);
    // create_directories reports success when `dir` exists as a file; mkdir -p does not.
    if (!ec && !std::filesystem::is_directory(dir, ec) && !ec) {
      ec = std::make_error_code(std::errc::not_a_directory);
    }
  });
}

Status LocalFsBackend::Remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "unlink " + path);
  return Status::Ok();
}

Status LocalFsBackend::RemoveAll(const std::string& path) {
  return FsCall("rm -r " + path,
                [&](std::error_code& ec) { std::filesystem::remove_all(path, ec); });
}

}  // namespace rtft
