// Writes checkpoint versions by hand for the reader-side tests (restore, verify, resharding,
// corruption, rtft-ckpt): rank files through the layout (CreateSkeleton, bytes written at the
// returned offsets, FinalizeFile) with chunk checksums, then MANIFEST.json and LATEST with plain
// file I/O. It does not depend on the checkpoint engine, so readers are tested on their own.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/layout/naming.h"
#include "core/checksum.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft::testing {

// What one rank saved: tensors point at host memory holding their bytes.
struct RankState {
  std::vector<TensorDesc> tensors;
  std::vector<ObjectBlob> objects;
};

struct FixtureOptions {
  uint64_t chunk_bytes = 1 << 20;
  bool write_global_manifest = true;  // false: an incomplete version
  bool move_latest = true;
};

inline Status WriteBytesAt(const std::string& path, uint64_t offset, const void* data,
                           uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return Status::FromErrno(errno, "opening " + path);
  ssize_t n = ::pwrite(fd, data, bytes, static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes)) return Status::IoError("short pwrite to " + path);
  return Status::Ok();
}

inline Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return out ? Status::Ok() : Status::IoError("writing " + path);
}

// XXH3 of each chunk_bytes piece of `data`, as the manifest stores them.
inline std::vector<uint64_t> ChunkChecksums(const void* data, uint64_t bytes,
                                            uint64_t chunk_bytes) {
  std::vector<uint64_t> sums;
  const char* p = static_cast<const char*>(data);
  for (uint64_t c = 0; c < ChunkCount(bytes, chunk_bytes); ++c) {
    uint64_t begin = c * chunk_bytes, end = std::min(bytes, begin + chunk_bytes);
    sums.push_back(Xxh3(p + begin, end - begin));
  }
  return sums;
}

inline Status WriteRankFile(const std::string& path, uint64_t version, int rank, int world_size,
                            const RankState& state, uint64_t chunk_bytes) {
  std::vector<DatasetSpec> specs;
  for (const TensorDesc& t : state.tensors) specs.push_back({t.name, t.dtype, t.shape, t.shard});
  RTFT_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, CreateSkeleton(path, specs));
  FileManifest m;
  m.version = version;
  m.rank = rank;
  m.world_size = world_size;
  m.chunk_bytes = chunk_bytes;
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const TensorDesc& t = state.tensors[i];
    if (t.bytes() > 0) RTFT_RETURN_IF_ERROR(WriteBytesAt(path, offsets[i], t.data, t.bytes()));
    TensorEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.shard = t.shard;
    e.offset = offsets[i];
    e.bytes = t.bytes();
    e.xxh3 = ChunkChecksums(t.data, t.bytes(), chunk_bytes);
    m.tensors.push_back(std::move(e));
  }
  return FinalizeFile(path, state.objects, &m);
}

// Writes version `version` of `root` as `world_size` ranks with states `ranks` (one per rank):
// every rank file, then (unless told not to) MANIFEST.json, then LATEST.
inline Status WriteVersion(const std::string& root, uint64_t version, int world_size,
                           const std::vector<RankState>& ranks,
                           const FixtureOptions& options = {}) {
  if (static_cast<int>(ranks.size()) != world_size)
    return Status::InvalidArgument("fixture: one RankState per rank");
  ::mkdir(root.c_str(), 0755);
  ::mkdir(VersionDir(root, version).c_str(), 0755);
  GlobalManifest global;
  global.version = version;
  global.world_size = world_size;
  for (int r = 0; r < world_size; ++r) {
    const std::string path = RankFilePath(root, version, r);
    RTFT_RETURN_IF_ERROR(
        WriteRankFile(path, version, r, world_size, ranks[r], options.chunk_bytes));
    RTFT_ASSIGN_OR_RETURN(std::string json, ReadFileManifestJson(path));
    RTFT_ASSIGN_OR_RETURN(FileManifest m, FileManifest::FromJson(json));
    global.format_version = std::max(global.format_version, m.format_version);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
    global.files.push_back(
        {r, RankFileName(r), static_cast<uint64_t>(st.st_size), Xxh3(json.data(), json.size())});
  }
  if (!options.write_global_manifest) return Status::Ok();
  RTFT_RETURN_IF_ERROR(WriteTextFile(GlobalManifestPath(root, version), global.ToJson()));
  if (!options.move_latest) return Status::Ok();
  return WriteTextFile(LatestPath(root), std::to_string(version) + "\n");
}

// A host tensor that owns its memory; desc.data points into `storage`.
template <typename T>
struct OwnedTensor {
  std::vector<T> storage;
  TensorDesc desc;
};

template <typename T>
OwnedTensor<T> MakeTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                          std::vector<T> values, ShardCoords shard = {}) {
  OwnedTensor<T> t;
  t.storage = std::move(values);
  t.desc.name = name;
  t.desc.dtype = dtype;
  t.desc.shape = std::move(shape);
  t.desc.shard = std::move(shard);
  t.desc.data = t.storage.data();
  return t;
}

// `n` doubles whose bits only a byte-exact path keeps: the first ones are -0.0, the smallest
// subnormal, 0.1, 1/3, the largest double, infinity and a NaN with a payload (a conversion to
// float32 or to text and back changes each of them), the rest arbitrary bit patterns from `seed`
// (NaNs among them).
inline std::vector<double> HardDoubles(size_t n, uint64_t seed) {
  const uint64_t special[] = {0x8000000000000000ull, 0x0000000000000001ull, 0x3fb999999999999aull,
                              0x3fd5555555555555ull, 0x7fefffffffffffffull, 0x7ff0000000000000ull,
                              0x7ff80000deadbeefull};
  std::vector<double> v(n);
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits;
    if (i < sizeof(special) / sizeof(special[0])) {
      bits = special[i];
    } else {  // splitmix64
      x += 0x9e3779b97f4a7c15ull;
      bits = x;
      bits = (bits ^ (bits >> 30)) * 0xbf58476d1ce4e5b9ull;
      bits = (bits ^ (bits >> 27)) * 0x94d049bb133111ebull;
      bits ^= bits >> 31;
    }
    std::memcpy(&v[i], &bits, sizeof(bits));
  }
  return v;
}

}  // namespace rtft::testing
