// Atomic commit of checkpoint versions (docs/format.md, "Commit"). A file becomes visible only
// by rename after fsync; a version becomes complete only when rank 0 has seen every rank's file
// and written MANIFEST.json; LATEST moves only after that. A crash at any moment leaves the
// previous complete version loadable.
#pragma once

#include <atomic>
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
// each one's manifest, writes the version's MANIFEST.json, then, with `move_latest`, moves LATEST
// to `version`. Once `*abandon` is true the wait ends with kAborted. Versions can finish out of
// order; the engine passes false for a version older than one it already moved LATEST to, so that
// LATEST never goes back. With a nonzero `write_id` a rank's file counts only once it carries that
// id (CheckpointOptions::write_id): a file of an earlier write of the version is waited past.
Status CommitVersion(IoBackend* io, const std::string& root, uint64_t version, int world_size,
                     std::chrono::milliseconds timeout, bool move_latest = true,
                     const std::atomic<bool>* abandon = nullptr, uint64_t write_id = 0);

// Deletes complete versions older than the newest `keep` complete ones, and incomplete versions
// older than the oldest kept one (leftovers of crashed writers). keep == 0 keeps everything.
// Nothing at or above `below` is touched: the engine passes its oldest version still being
// written, which may finish after newer ones.
Status PruneVersions(IoBackend* io, const std::string& root, int keep, uint64_t below = UINT64_MAX);

}  // namespace rtft
