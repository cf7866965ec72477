// Manifests: what a checkpoint file holds (FileManifest, stored as a JSON string dataset written
// last into the HDF5 file) and what a version holds (GlobalManifest, MANIFEST.json beside the rank
// files). Parsing is strict: a manifest from a newer format, or one missing a field, is an
// error that says so. Specified in docs/format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rtft/checkpoint.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

// The newest format version this rt-ft reads and writes; bumped on any change a reader must know
// about, and readers refuse newer versions. Writers stamp each file with the oldest version that
// has everything in it (FormatVersionFor), so a file older readers understand stays readable by
// them (docs/format.md, "Format versions").
constexpr int kFormatVersion = 2;
// The version of a file that uses nothing added since the first format.
constexpr int kFirstFormatVersion = 1;
constexpr const char* kFormatName = "rt-ft checkpoint";
// HDF5 names.
constexpr const char* kManifestDataset = "/rtft_manifest";  // scalar string dataset, written last
constexpr const char* kFormatVersionAttribute = "rtft_format_version";
constexpr const char* kTensorGroup = "/tensors";
constexpr const char* kObjectGroup = "/objects";

struct TensorEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  ShardCoords shard;
  uint64_t offset = 0;  // of the dataset's bytes in the file
  uint64_t bytes = 0;
  // XXH3-64 of each chunk_bytes-sized piece, in order (one entry for a tensor up to chunk_bytes).
  std::vector<uint64_t> xxh3;

  std::string dataset() const { return std::string(kTensorGroup) + "/" + name; }
};

struct ObjectEntry {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;

  std::string dataset() const { return std::string(kObjectGroup) + "/" + name; }
};

struct FileManifest {
  // Set by FinalizeFile from the tensors' dtypes (FormatVersionFor) when the file is written.
  int format_version = kFirstFormatVersion;
  uint64_t version = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t chunk_bytes = 0;
  int64_t created_unix_ms = 0;
  uint64_t write_id = 0;  // CheckpointOptions::write_id; the `write` field, absent when 0
  std::vector<TensorEntry> tensors;
  std::vector<ObjectEntry> objects;
  VersionMarks marks;  // the optional `certified` field: absent when nothing is marked

  std::string ToJson() const;
  static StatusOr<FileManifest> FromJson(const std::string& json);
  const TensorEntry* FindTensor(const std::string& name) const;
  const ObjectEntry* FindObject(const std::string& name) const;
};

struct GlobalFileEntry {
  int rank = 0;
  std::string file;  // relative to the version directory
  uint64_t bytes = 0;
  uint64_t manifest_xxh3 = 0;  // XXH3 of that file's manifest JSON
};

struct GlobalManifest {
  int format_version = kFirstFormatVersion;  // the highest of its files' versions
  uint64_t version = 0;
  int world_size = 1;
  int64_t created_unix_ms = 0;
  std::vector<GlobalFileEntry> files;
  VersionMarks marks;  // what every file's marks share (CombineMarks)

  std::string ToJson() const;
  static StatusOr<GlobalManifest> FromJson(const std::string& json);
};

// The oldest format version that has `dtype`: 2 for float64, 1 for the others.
int FormatVersionOf(DType dtype);
// The oldest format version that has every one of `dtypes` (kFirstFormatVersion for none).
int FormatVersionFor(const std::vector<DType>& dtypes);

// A version's marks from its files': checked, agreed and replayed only where every file is.
VersionMarks CombineMarks(const std::vector<VersionMarks>& files);

// Wall-clock milliseconds since the epoch, for the manifests' created_unix_ms.
int64_t NowUnixMs();

// Number of chunks a tensor of `bytes` has at `chunk_bytes` (at least one, even when empty).
uint64_t ChunkCount(uint64_t bytes, uint64_t chunk_bytes);

}  // namespace rtft
