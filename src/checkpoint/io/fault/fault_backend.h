// A fault-injecting I/O backend that wraps another one: the seam that makes a disk filling up in
// the middle of a flush, a failing fsync or a failing rename testable. Used by tests, and by
// tools that read a spec such as "enospc_after=1M,fail_sync,path=rank-1" from the environment.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft {

struct FaultSpec {
  // Writes to matching files fail once their cumulative size would pass this (-1: never); the
  // limit stays reached, as a full disk does. 0 fails every write.
  int64_t fail_writes_after_bytes = -1;
  int error = ENOSPC;  // errno of a failed write
  // Write the part that still fits before failing (a real short write on disk). On a direct file
  // that part is rounded down to kDirectIoAlignment, as a device would.
  bool partial = true;
  bool fail_sync = false;      // File::Sync of matching files fails with EIO
  bool fail_rename = false;    // Rename fails with EIO when either path matches; nothing moves
  bool fail_sync_dir = false;  // SyncDir fails with EIO when the directory matches
  // Faults apply only to paths containing this; empty matches every path.
  std::string path_substring;
  // Raise each fault as a C++ exception instead of returning its errno, as a third-party
  // backend or library might: proves that no exception escapes the engine's threads.
  bool throw_instead = false;
};

// What the backend did; shared so a test can read it while the backend is in use.
struct FaultStats {
  std::atomic<uint64_t> bytes_written{0};          // reached the inner backend, any file
  std::atomic<uint64_t> matched_bytes_written{0};  // of those, to files counted against the limit
  std::atomic<uint64_t> faults_injected{0};
};

// Comma-separated items; an empty text is the spec that injects nothing:
//   enospc_after=<bytes>      fail_writes_after=<bytes> with errno ENOSPC
//   fail_writes_after=<bytes> (sizes as ParseBytes: 4096, 64K, 1M)
//   errno=<ENOSPC|EDQUOT|EIO|EROFS|EACCES|number>
//   partial=<0|1>             fail_sync  fail_rename  fail_sync_dir  path=<substring>
//   throw                     raise faults as exceptions
StatusOr<FaultSpec> ParseFaultSpec(const std::string& text);

// `stats` may be null when nobody reads the counters.
std::unique_ptr<IoBackend> CreateFaultBackend(std::unique_ptr<IoBackend> inner, FaultSpec spec,
                                              std::shared_ptr<FaultStats> stats = nullptr);

}  // namespace rtft
