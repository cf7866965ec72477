// Finding and opening the versions of a checkpoint directory for reading: the global manifest of
// a version and the rank files it lists, each checked against it. Shared by ListVersions,
// LatestVersion, Restore, VerifyVersion and rtft-ckpt; writers use commit.h instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/read/reader.h"
#include "rtft/status.h"

namespace rtft {

// The backend readers use: RTFT_CKPT_IO_BACKEND, buffered.
StatusOr<std::unique_ptr<IoBackend>> CreateReadBackend();

// NotFound naming `root` when it is not an existing directory.
Status CheckRootExists(const std::string& root);

// MANIFEST.json of `version`: NotFound when the version directory does not exist, DataLoss when
// the version is incomplete (no MANIFEST.json) or its manifest is damaged or for another version.
StatusOr<GlobalManifest> ReadGlobalManifest(IoBackend* io, const std::string& root,
                                            uint64_t version);

// Opens every file `global` lists, in rank order, each once, and checks it against the global
// manifest: ranks 0..world_size-1 each exactly once, file size, XXH3 of the file's manifest, and
// the version, rank and world size the file says it holds. Any difference is DataLoss.
StatusOr<std::vector<std::unique_ptr<CheckpointFileReader>>> OpenVersionFiles(
    IoBackend* io, const std::string& root, const GlobalManifest& global);

}  // namespace rtft
