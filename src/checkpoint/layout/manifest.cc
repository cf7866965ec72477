#include "checkpoint/layout/manifest.h"

#include <nlohmann/json.hpp>

#include <chrono>

#include "core/checksum.h"

namespace rtft {
namespace {

using nlohmann::json;

// Every accessor below reports the field it was looking for, so a damaged manifest says what
// is wrong with it instead of throwing through the library boundary.
template <typename T>
Status Get(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end())
    return Status::DataLoss(std::string("manifest field '") + key + "' is missing");
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("manifest field '") + key + "' has the wrong type");
  }
  return Status::Ok();
}

Status GetChecksum(const json& j, const char* key, uint64_t* out) {
  std::string hex;
  RTFT_RETURN_IF_ERROR(Get(j, key, &hex));
  if (!ChecksumFromHex(hex, out))
    return Status::DataLoss(std::string("manifest field '") + key + "' is not a checksum");
  return Status::Ok();
}

Status CheckFormat(const json& j) {
  std::string format;
  RTFT_RETURN_IF_ERROR(Get(j, "format", &format));
  if (format != kFormatName) return Status::InvalidArgument("not an rt-ft checkpoint manifest");
  int version = 0;
  RTFT_RETURN_IF_ERROR(Get(j, "format_version", &version));
  if (version > kFormatVersion)
    return Status::Unimplemented("checkpoint format version " + std::to_string(version) +
                                 " is newer than this rt-ft reads (" +
                                 std::to_string(kFormatVersion) + "); upgrade rt-ft");
  if (version < 1) return Status::DataLoss("bad format version " + std::to_string(version));
  return Status::Ok();
}

StatusOr<json> Parse(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("manifest is not valid JSON");
  RTFT_RETURN_IF_ERROR(CheckFormat(j));
  return j;
}

Status ParseTensor(const json& t, uint64_t chunk_bytes, TensorEntry* e) {
  RTFT_RETURN_IF_ERROR(Get(t, "name", &e->name));
  std::string dtype;
  RTFT_RETURN_IF_ERROR(Get(t, "dtype", &dtype));
  if (!ParseDType(dtype, &e->dtype))
    return Status::DataLoss("tensor '" + e->name + "' has unknown dtype '" + dtype + "'");
  RTFT_RETURN_IF_ERROR(Get(t, "shape", &e->shape));
  if (t.contains("global_shape")) {
    RTFT_RETURN_IF_ERROR(Get(t, "global_shape", &e->shard.global_shape));
    RTFT_RETURN_IF_ERROR(Get(t, "shard_offset", &e->shard.offset));
  }
  RTFT_RETURN_IF_ERROR(Get(t, "offset", &e->offset));
  RTFT_RETURN_IF_ERROR(Get(t, "bytes", &e->bytes));
  std::vector<std::string> sums;
  RTFT_RETURN_IF_ERROR(Get(t, "xxh3", &sums));
  uint64_t elements = 1;
  for (int64_t d : e->shape) {
    if (d < 0) return Status::DataLoss("tensor '" + e->name + "' has a negative dimension");
    elements *= static_cast<uint64_t>(d);
  }
  if (elements * DTypeSize(e->dtype) != e->bytes)
    return Status::DataLoss("tensor '" + e->name + "': byte count does not match shape and dtype");
  if (sums.size() != ChunkCount(e->bytes, chunk_bytes))
    return Status::DataLoss("tensor '" + e->name + "': wrong number of chunk checksums");
  for (const auto& s : sums) {
    uint64_t v;
    if (!ChecksumFromHex(s, &v)) return Status::DataLoss("tensor '" + e->name + "': bad checksum");
    e->xxh3.push_back(v);
  }
  return Status::Ok();
}

}  // namespace

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t ChunkCount(uint64_t bytes, uint64_t chunk_bytes) {
  if (bytes == 0 || chunk_bytes == 0) return 1;
  return (bytes + chunk_bytes - 1) / chunk_bytes;
}

std::string FileManifest::ToJson() const {
  json j;
  j["format"] = kFormatName;
  j["format_version"] = format_version;
  j["version"] = version;
  j["rank"] = rank;
  j["world_size"] = world_size;
  j["chunk_bytes"] = chunk_bytes;
  j["created_unix_ms"] = created_unix_ms;
  json tensors = json::array();
  for (const TensorEntry& t : this->tensors) {
    json e;
    e["name"] = t.name;
    e["dataset"] = t.dataset();
    e["dtype"] = DTypeName(t.dtype);
    e["shape"] = t.shape;
    if (t.shard.sharded()) {
      e["global_shape"] = t.shard.global_shape;
      e["shard_offset"] = t.shard.offset;
    }
    e["offset"] = t.offset;
    e["bytes"] = t.bytes;
    json sums = json::array();
    for (uint64_t s : t.xxh3) sums.push_back(ChecksumToHex(s));
    e["xxh3"] = sums;
    tensors.push_back(std::move(e));
  }
  j["tensors"] = std::move(tensors);
  json objects = json::array();
  for (const ObjectEntry& o : this->objects) {
    objects.push_back({{"name", o.name},
                       {"dataset", o.dataset()},
                       {"offset", o.offset},
                       {"bytes", o.bytes},
                       {"xxh3", ChecksumToHex(o.xxh3)}});
  }
  j["objects"] = std::move(objects);
  return j.dump();
}

StatusOr<FileManifest> FileManifest::FromJson(const std::string& text) {
  RTFT_ASSIGN_OR_RETURN(json j, Parse(text));
  FileManifest m;
  RTFT_RETURN_IF_ERROR(Get(j, "format_version", &m.format_version));
  RTFT_RETURN_IF_ERROR(Get(j, "version", &m.version));
  RTFT_RETURN_IF_ERROR(Get(j, "rank", &m.rank));
  RTFT_RETURN_IF_ERROR(Get(j, "world_size", &m.world_size));
  RTFT_RETURN_IF_ERROR(Get(j, "chunk_bytes", &m.chunk_bytes));
  RTFT_RETURN_IF_ERROR(Get(j, "created_unix_ms", &m.created_unix_ms));
  if (m.chunk_bytes == 0) return Status::DataLoss("manifest chunk_bytes is zero");
  json tensors, objects;
  RTFT_RETURN_IF_ERROR(Get(j, "tensors", &tensors));
  RTFT_RETURN_IF_ERROR(Get(j, "objects", &objects));
  if (!tensors.is_array() || !objects.is_array())
    return Status::DataLoss("manifest tensors/objects are not lists");
  for (const json& t : tensors) {
    TensorEntry e;
    RTFT_RETURN_IF_ERROR(ParseTensor(t, m.chunk_bytes, &e));
    m.tensors.push_back(std::move(e));
  }
  for (const json& o : objects) {
    ObjectEntry e;
    RTFT_RETURN_IF_ERROR(Get(o, "name", &e.name));
    RTFT_RETURN_IF_ERROR(Get(o, "offset", &e.offset));
    RTFT_RETURN_IF_ERROR(Get(o, "bytes", &e.bytes));
    RTFT_RETURN_IF_ERROR(GetChecksum(o, "xxh3", &e.xxh3));
    m.objects.push_back(std::move(e));
  }
  return m;
}

const TensorEntry* FileManifest::FindTensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const ObjectEntry* FileManifest::FindObject(const std::string& name) const {
  for (const auto& o : objects)
    if (o.name == name) return &o;
  return nullptr;
}

std::string GlobalManifest::ToJson() const {
  json j;
  j["format"] = kFormatName;
  j["format_version"] = format_version;
  j["version"] = version;
  j["world_size"] = world_size;
  j["created_unix_ms"] = created_unix_ms;
  json files = json::array();
  for (const auto& f : this->files) {
    files.push_back({{"rank", f.rank},
                     {"file", f.file},
                     {"bytes", f.bytes},
                     {"manifest_xxh3", ChecksumToHex(f.manifest_xxh3)}});
  }
  j["files"] = std::move(files);
  return j.dump(1);
}

StatusOr<GlobalManifest> GlobalManifest::FromJson(const std::string& text) {
  RTFT_ASSIGN_OR_RETURN(json j, Parse(text));
  GlobalManifest m;
  RTFT_RETURN_IF_ERROR(Get(j, "format_version", &m.format_version));
  RTFT_RETURN_IF_ERROR(Get(j, "version", &m.version));
  RTFT_RETURN_IF_ERROR(Get(j, "world_size", &m.world_size));
  RTFT_RETURN_IF_ERROR(Get(j, "created_unix_ms", &m.created_unix_ms));
  json files;
  RTFT_RETURN_IF_ERROR(Get(j, "files", &files));
  if (!files.is_array()) return Status::DataLoss("global manifest 'files' is not a list");
  for (const json& f : files) {
    GlobalFileEntry e;
    RTFT_RETURN_IF_ERROR(Get(f, "rank", &e.rank));
    RTFT_RETURN_IF_ERROR(Get(f, "file", &e.file));
    RTFT_RETURN_IF_ERROR(Get(f, "bytes", &e.bytes));
    RTFT_RETURN_IF_ERROR(GetChecksum(f, "manifest_xxh3", &e.manifest_xxh3));
    m.files.push_back(std::move(e));
  }
  if (static_cast<int>(m.files.size()) != m.world_size)
    return Status::DataLoss("global manifest lists " + std::to_string(m.files.size()) +
                            " files for " + std::to_string(m.world_size) + " ranks");
  return m;
}

}  // namespace rtft
