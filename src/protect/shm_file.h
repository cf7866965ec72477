// A file in memory (tmpfs) mapped into the process: where the L1 snapshot and the L2 replica live
// (docs/protect.md). dp-launch gives each slot a directory of its own (RTFT_SHM_DIR) and removes
// it when the job ends, so the files outlive a crashed application and are found again by the
// process restarted on the slot.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "rtft/status.h"

namespace rtft::protect {

class ShmFile {
 public:
  // Opens `path` (created when absent, mode 0600, never through a link), grows it to at least
  // `bytes` and maps all of it.
  static StatusOr<std::unique_ptr<ShmFile>> Open(const std::string& path, size_t bytes);
  ~ShmFile();
  ShmFile(const ShmFile&) = delete;
  ShmFile& operator=(const ShmFile&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // Grows the file to at least `bytes` and maps it again (data() changes).
  Status Grow(size_t bytes);

 private:
  ShmFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Map(size_t bytes);

  int fd_ = -1;
  std::string path_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// The directory L1 and L2 live in: `configured`, else RTFT_SHM_DIR (set by dp-launch), else a
// new private directory under /dev/shm that `*owned` says to remove at the end.
StatusOr<std::string> ProtectDir(const std::string& configured, bool* owned);

}  // namespace rtft::protect
