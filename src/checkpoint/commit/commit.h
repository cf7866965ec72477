// Atomic commit of checkpoint versions (docs/format.md, "Commit"). A file becomes visible only
// by rename after fsync; a version becomes complete only when rank 0 has seen every rank's file
// and written MANIFEST.json; LATEST moves only after that. A crash at any moment leaves the
// previous complete version loadable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft {

// Temp file, write, fsync, rename over `path`, fsync the directory.
Status WriteFileAtomically(IoBackend* io, const std::string& path, const std::string& content);
// Reads a whole small file (a regular file, no link followed); DataLoss when it is larger than
// max_bytes.
StatusOr<std::string> ReadSmallFile(IoBackend* io, const std::string& path,
                                    uint64_t max_bytes = 64ull << 20);
// The same through a file the caller opened.
StatusOr<std::string> ReadSmallFile(File* file, uint64_t max_bytes = 64ull << 20);

// Rank 0's commit: waits (up to `timeout`) until every rank's file of `version` exists, checks
// each one's manifest, writes the version's MANIFEST.json, then moves LATEST to `version`.
Status CommitVersion(IoBackend* io, const std::string& root, uint64_t version, int world_size,
                     std::chrono::milliseconds timeout);

// Deletes complete versions older than the newest `keep` complete ones, and incomplete versions
// older than the oldest kept one (leftovers of crashed writers). keep == 0 keeps everything.
Status PruneVersions(IoBackend* io, const std::string& root, int keep);

}  // namespace rtft
