// The HDF5 side of a checkpoint file. Writing happens in two phases around the engine's own
// tensor I/O:
//   1. CreateSkeleton: one contiguous dataset per tensor under /tensors, allocated early, never
//      filled, 4 KiB aligned when 4 KiB or larger; returns where each dataset's bytes start, so the
//      engine writes tensor bytes there directly (O_DIRECT) without HDF5 in the data path.
//   2. FinalizeFile: reopens the file, appends the serialized objects under /objects and writes the
//      manifest dataset last.
// Readers use ReadFileManifest and then read bytes at the manifest's offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
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

// Creates (truncates) `path` as an HDF5 file with the given datasets and returns each dataset's
// file offset, in order (0 for empty datasets).
StatusOr<std::vector<uint64_t>> CreateSkeleton(const std::string& path,
                                               const std::vector<DatasetSpec>& tensors);

struct ObjectBlob {
  std::string name;
  std::string bytes;
};

// Appends `objects` to the file and writes `manifest` (after filling its object entries) as the
// file's last dataset. The caller fsyncs and renames afterwards.
Status FinalizeFile(const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest);

// Opens a checkpoint file and returns its manifest JSON. InvalidArgument when the file is not an
// rt-ft checkpoint, DataLoss when it is truncated or damaged, Unimplemented for a newer format.
StatusOr<std::string> ReadFileManifestJson(const std::string& path);
StatusOr<FileManifest> ReadFileManifest(const std::string& path);

}  // namespace rtft
