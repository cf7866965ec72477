#include "protect/shm_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/params.h"

namespace rtft::protect {

StatusOr<std::unique_ptr<ShmFile>> ShmFile::Open(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "opening " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::FailedPrecondition(path + " is not a regular file");
  }
  std::unique_ptr<ShmFile> f(new ShmFile(fd, path));
  const size_t want = std::max<size_t>(bytes, static_cast<size_t>(st.st_size));
  RTFT_RETURN_IF_ERROR(f->Map(want));
  return f;
}

ShmFile::~ShmFile() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

Status ShmFile::Map(size_t bytes) {
  if (bytes == 0) bytes = 4096;
  struct stat st {};
  if (fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
  if (static_cast<size_t>(st.st_size) < bytes) {
    // posix_fallocate reserves the tmpfs pages now, so a full /dev/shm fails here, with an
    // error, rather than later with SIGBUS on a store.
    const int rc = posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (rc != 0)
      return Status::FromErrno(rc, "reserving " + std::to_string(bytes) + " bytes for " + path_ +
                                       " (is the memory file system full?)");
  }
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping " + path_);
  data_ = static_cast<char*>(p);
  size_ = bytes;
  return Status::Ok();
}

Status ShmFile::Grow(size_t bytes) {
  if (bytes <= size_) return Status::Ok();
  return Map(bytes);
}

StatusOr<std::string> ProtectDir(const std::string& configured, bool* owned) {
  *owned = false;
  if (!configured.empty()) return configured;
  if (ParamIsSet(Param::kShmDir)) return ParamString(Param::kShmDir);
  char tmpl[] = "/dev/shm/rtft-protect-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::FromErrno(errno, "creating a directory in /dev/shm");
  *owned = true;
  return std::string(tmpl);
}

}  // namespace rtft::protect
