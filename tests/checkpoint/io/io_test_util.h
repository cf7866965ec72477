// Helpers shared by the I/O backend tests: aligned buffers and scratch directories.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/io/io_backend.h"

namespace rtft {

constexpr size_t kAlign = kDirectIoAlignment;

// Page-aligned memory, as the pinned pool hands out.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : bytes_(bytes) {
    data_ = static_cast<char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() { return data_; }
  size_t size() const { return bytes_; }
  // A pattern without a short period, so a block written to the wrong offset is noticed.
  void Fill(uint64_t seed) {
    for (size_t i = 0; i < bytes_; ++i) {
      uint64_t h = (i + seed) * 0x9E3779B97F4A7C15ull;
      data_[i] = static_cast<char>((h ^ (h >> 29)) >> 56);
    }
  }

 private:
  char* data_;
  size_t bytes_;
};

// What the kernel grants for O_DIRECT in `dir`, asked without the code under test.
inline bool KernelGrantsDirect(const std::string& dir) {
  std::string probe = dir + "/direct-probe";
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// A fresh directory on a disk file system (not /tmp, which may be tmpfs).
inline std::string MakeTempDir(const char* parent) {
  std::string templ = std::string(parent) + "/rtft-io-test-XXXXXX";
  char* dir = ::mkdtemp(templ.data());
  return dir ? std::string(dir) : std::string();
}

}  // namespace rtft
