// The HDF5 side of a checkpoint file. Writing happens in two phases around the engine's own
// tensor I/O:
//   1. CreateSkeleton: one contiguous dataset per tensor under /tensors, allocated early, never
//      filled, 4 KiB aligned when 4 KiB or larger; returns where each dataset's bytes start, so the
//      engine writes tensor bytes there directly (O_DIRECT) without HDF5 in the data path. The
//      serialized objects are written here too, after the tensors' space, while the engine's
//      tensor I/O has yet to start or is running.
//   2. FinalizeFile: reopens the file, appends any further objects under /objects and writes the
//      manifest dataset last.
// Readers use ReadFileManifest and then read bytes at the manifest's offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/layout/manifest.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

// Datasets this large or larger start on a 4 KiB boundary (O_DIRECT alignment).
constexpr uint64_t kDatasetAlignment = 4096;

struct DatasetSpec {
  std::string name;  // relative to /tensors
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  ShardCoords shard;  // stored as dataset attributes for h5py users (the manifest is canonical)
};

struct ObjectBlob {
  std::string name;
  std::string bytes;
};

// Creates (truncates) `path` as an HDF5 file with the given datasets and returns each dataset's
// file offset, in order (0 for empty datasets). `objects` are written after the tensors' space
// and described in `object_entries` (offsets, sizes, checksums).
StatusOr<std::vector<uint64_t>> CreateSkeleton(const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects = {},
                                               std::vector<ObjectEntry>* object_entries = nullptr);

// Appends `objects` (often none: the skeleton holds them) to the file, adds their entries to
// manifest->objects, and writes `manifest` as the file's last dataset. The caller fsyncs and
// renames afterwards.
Status FinalizeFile(const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest);

// Opens a checkpoint file and returns its manifest JSON. InvalidArgument when the file is not an
// rt-ft checkpoint, DataLoss when it is truncated or damaged, Unimplemented for a newer format.
StatusOr<std::string> ReadFileManifestJson(const std::string& path);
StatusOr<FileManifest> ReadFileManifest(const std::string& path);

}  // namespace rtft
