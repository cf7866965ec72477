// The HDF5 side of a checkpoint file. Writing happens in two phases around the engine's own
// tensor I/O:
//   1. CreateSkeleton: one contiguous dataset per tensor under /tensors, allocated early, never
//      filled, 4 KiB aligned when 4 KiB or larger; returns where each dataset's bytes start, so the
//      engine writes tensor bytes there directly (O_DIRECT) without HDF5 in the data path. The
//      serialized objects are written here too, after the tensors' space, while the engine's
//      tensor I/O has yet to start or is running.
//   2. FinalizeFile: reopens the file, appends any further objects under /objects and writes the
//      manifest dataset last.
// Readers use ReadFileManifestJson and then read bytes at the manifest's offsets. HDF5 reads and
// writes every byte of its own through the I/O backend (hdf5_driver.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/io/io_backend.h"
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

// Creates (truncates) `path` through `io` as an HDF5 file with the given datasets and returns
// each dataset's file offset, in order (0 for empty datasets). The root attribute holds the
// oldest format version that has every dtype of `tensors` (FormatVersionFor). `objects` are written
// after the tensors' space and described in `object_entries` (offsets, sizes, checksums). Every
// HDF5 write goes through `io` (hdf5_driver.h), and any that failed fails the call.
StatusOr<std::vector<uint64_t>> CreateSkeleton(IoBackend* io, const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects = {},
                                               std::vector<ObjectEntry>* object_entries = nullptr);

// Appends `objects` (often none: the skeleton holds them) to the file, adds their entries to
// manifest->objects, sets manifest->format_version from its tensors' dtypes (as CreateSkeleton
// did for the root attribute), and writes `manifest` as the file's last dataset; then reads the
// manifest back and compares it, so a write the disk lost is caught here. The caller fsyncs and
// renames afterwards, and only after this returned OK.
Status FinalizeFile(IoBackend* io, const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest);

// The same through the posix backend, for tests and test generators.
StatusOr<std::vector<uint64_t>> CreateSkeleton(const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects = {},
                                               std::vector<ObjectEntry>* object_entries = nullptr);
Status FinalizeFile(const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest);

// The largest manifest a reader accepts (docs/format.md, "Limits").
constexpr uint64_t kMaxManifestBytes = 256ull << 20;

// Reads the manifest JSON of the checkpoint file open as `file`, through it (layout_read.cc):
// InvalidArgument when the file is not an rt-ft checkpoint, DataLoss when it is truncated or
// damaged, Unimplemented for a newer format. Every HDF5 object is checked (link kind, class,
// size, dataspace, storage) before a byte of it is read, into a buffer sized from what was
// checked. `format_version`, when given, receives the root attribute's version.
StatusOr<std::string> ReadFileManifestJson(File* file, int* format_version = nullptr);
// The same for `path`, opened through the default read backend (no symbolic link followed).
StatusOr<std::string> ReadFileManifestJson(const std::string& path);
StatusOr<FileManifest> ReadFileManifest(const std::string& path);

}  // namespace rtft
