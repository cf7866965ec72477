#include "checkpoint/layout/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>

#include "checkpoint/layout/json_fields.h"
#include "core/checksum.h"

namespace rtft {
namespace {

using nlohmann::json;

// Limits of what a reader accepts (docs/format.md, "Limits").
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;
// The largest dtype: chunks hold whole values of any dtype.
constexpr uint64_t kChunkAlignment = 8;

Status CheckFormat(const JsonFields& f, int* format_version) {
  std::string format;
  RTFT_RETURN_IF_ERROR(f.String("format", &format));
  if (format != kFormatName) return Status::InvalidArgument("not an rt-ft checkpoint manifest");
  int64_t version = 0;
  RTFT_RETURN_IF_ERROR(f.Int("format_version", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), &version));
  if (version > kFormatVersion)
    return Status::Unimplemented("checkpoint format version " + std::to_string(version) +
                                 " is newer than this rt-ft reads (" +
                                 std::to_string(kFormatVersion) + "); upgrade rt-ft");
  if (version < 1) return Status::DataLoss("bad format version " + std::to_string(version));
  *format_version = static_cast<int>(version);
  return Status::Ok();
}

StatusOr<json> Parse(const std::string& text) {
  RTFT_RETURN_IF_ERROR(CheckJsonDepth(text));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss("manifest is not valid JSON (or not UTF-8)");
  return j;
}

// The shared head of both manifests: format, version, world size, creation time.
Status ParseHead(const JsonFields& f, int* format_version, uint64_t* version, int* world_size,
                 int64_t* created_unix_ms) {
  RTFT_RETURN_IF_ERROR(CheckFormat(f, format_version));
  RTFT_RETURN_IF_ERROR(f.Uint("version", std::numeric_limits<uint64_t>::max(), version));
  int64_t ws = 0;
  RTFT_RETURN_IF_ERROR(f.Int("world_size", 1, kMaxWorldSize, &ws));
  *world_size = static_cast<int>(ws);
  return f.Int("created_unix_ms", std::numeric_limits<int64_t>::min(),
               std::numeric_limits<int64_t>::max(), created_unix_ms);
}

// Names must be unique within a file: a reader looks tensors and objects up by name.
Status CheckUnique(std::set<std::string>* seen, const std::string& name, const char* what) {
  if (name.empty())
    return Status::DataLoss(std::string("manifest lists a ") + what + " with an empty name");
  if (!seen->insert(name).second)
    return Status::DataLoss(std::string("manifest lists ") + what + " '" + name + "' twice");
  return Status::Ok();
}

Status ParseShard(const JsonFields& f, TensorEntry* e) {
  if (!f.Has("global_shape") && !f.Has("shard_offset")) return Status::Ok();
  RTFT_RETURN_IF_ERROR(f.Dims("global_shape", &e->shard.global_shape));
  RTFT_RETURN_IF_ERROR(f.Dims("shard_offset", &e->shard.offset));
  if (e->shard.global_shape.size() != e->shape.size() || e->shard.offset.size() != e->shape.size())
    return f.Error("global_shape", "and shard_offset must have as many dimensions as shape");
  if (e->shard.global_shape.empty()) return f.Error("global_shape", "is empty on a shard");
  for (size_t d = 0; d < e->shape.size(); ++d) {
    // Both are in [0, INT64_MAX], so the subtraction cannot wrap.
    if (e->shard.offset[d] > e->shard.global_shape[d] ||
        e->shape[d] > e->shard.global_shape[d] - e->shard.offset[d])
      return f.Error("shard_offset",
                     "puts the shard outside global_shape in dimension " + std::to_string(d));
  }
  return Status::Ok();
}

Status ParseTensor(const JsonFields& f, int format_version, uint64_t chunk_bytes, TensorEntry* e) {
  RTFT_RETURN_IF_ERROR(f.String("name", &e->name));
  std::string dtype;
  RTFT_RETURN_IF_ERROR(f.String("dtype", &dtype));
  if (!ParseDType(dtype, &e->dtype))
    return Status::DataLoss("tensor '" + e->name + "' has unknown dtype '" + dtype + "'");
  // A writer stamps a file with a version that has all its dtypes; a file that claims an older
  // one was not written by rt-ft, and an older reader would misread it rather than refuse it.
  if (FormatVersionOf(e->dtype) > format_version)
    return Status::DataLoss("tensor '" + e->name + "' has dtype " + dtype +
                            ", which format version " + std::to_string(format_version) +
                            " does not have (it came with version " +
                            std::to_string(FormatVersionOf(e->dtype)) + ")");
  RTFT_RETURN_IF_ERROR(f.Dims("shape", &e->shape));
  RTFT_RETURN_IF_ERROR(ParseShard(f, e));
  RTFT_RETURN_IF_ERROR(f.Uint("offset", std::numeric_limits<uint64_t>::max(), &e->offset));
  RTFT_RETURN_IF_ERROR(f.Uint("bytes", std::numeric_limits<uint64_t>::max(), &e->bytes));
  uint64_t expected = DTypeSize(e->dtype);
  for (int64_t d : e->shape) {
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected))
      return Status::DataLoss("tensor '" + e->name + "': its shape holds more than 2^64 bytes");
  }
  if (expected != e->bytes)
    return Status::DataLoss("tensor '" + e->name + "': byte count " + std::to_string(e->bytes) +
                            " does not match shape and dtype (" + std::to_string(expected) + ")");
  std::string dataset;
  if (f.Has("dataset")) RTFT_RETURN_IF_ERROR(f.String("dataset", &dataset));
  return f.Checksums("xxh3", ChunkCount(e->bytes, chunk_bytes), &e->xxh3);
}

Status ParseObject(const JsonFields& f, ObjectEntry* e) {
  RTFT_RETURN_IF_ERROR(f.String("name", &e->name));
  RTFT_RETURN_IF_ERROR(f.Uint("offset", std::numeric_limits<uint64_t>::max(), &e->offset));
  RTFT_RETURN_IF_ERROR(f.Uint("bytes", std::numeric_limits<uint64_t>::max(), &e->bytes));
  std::string dataset;
  if (f.Has("dataset")) RTFT_RETURN_IF_ERROR(f.String("dataset", &dataset));
  return f.Checksum("xxh3", &e->xxh3);
}

std::string Item(const char* list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "].";
}

// The optional `certified` object (docs/format.md, "Certification"): written only when something
// is marked; when present, all three fields, and `agreed` only with `checked`.
void PutMarks(const VersionMarks& m, json* j) {
  if (!m.checked && !m.replayed) return;
  (*j)["certified"] = {{"checked", m.checked}, {"agreed", m.agreed}, {"replayed", m.replayed}};
}

Status ParseMarks(const JsonFields& f, VersionMarks* m) {
  if (!f.Has("certified")) return Status::Ok();
  const json* certified = nullptr;
  RTFT_RETURN_IF_ERROR(f.Object("certified", &certified));
  const JsonFields c(*certified, "certified.");
  RTFT_RETURN_IF_ERROR(c.Bool("checked", &m->checked));
  RTFT_RETURN_IF_ERROR(c.Bool("agreed", &m->agreed));
  RTFT_RETURN_IF_ERROR(c.Bool("replayed", &m->replayed));
  if (m->agreed && !m->checked) return c.Error("agreed", "is true of copies never checked");
  return Status::Ok();
}

}  // namespace

VersionMarks CombineMarks(const std::vector<VersionMarks>& files) {
  VersionMarks all;
  if (files.empty()) return all;
  all.checked = all.agreed = all.replayed = true;
  for (const VersionMarks& f : files) {
    all.checked = all.checked && f.checked;
    all.agreed = all.agreed && f.checked && f.agreed;
    all.replayed = all.replayed && f.replayed;
  }
  return all;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A switch over every dtype, so that the next one added must say which version brings it.
int FormatVersionOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
      return kFirstFormatVersion;
    case DType::kFloat64:
      return 2;
  }
  return kFormatVersion + 1;  // not a dtype: no version has it
}

int FormatVersionFor(const std::vector<DType>& dtypes) {
  int version = kFirstFormatVersion;
  for (DType d : dtypes) version = std::max(version, FormatVersionOf(d));
  return version;
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
  if (write_id != 0) j["write"] = write_id;
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
  PutMarks(marks, &j);
  return j.dump();
}

StatusOr<FileManifest> FileManifest::FromJson(const std::string& text) {
  RTFT_ASSIGN_OR_RETURN(json j, Parse(text));
  const JsonFields f(j, "");
  FileManifest m;
  RTFT_RETURN_IF_ERROR(
      ParseHead(f, &m.format_version, &m.version, &m.world_size, &m.created_unix_ms));
  int64_t rank = 0;
  RTFT_RETURN_IF_ERROR(f.Int("rank", 0, m.world_size - 1, &rank));
  m.rank = static_cast<int>(rank);
  RTFT_RETURN_IF_ERROR(f.Uint("chunk_bytes", std::numeric_limits<uint64_t>::max(), &m.chunk_bytes));
  if (m.chunk_bytes == 0 || m.chunk_bytes % kChunkAlignment != 0)
    return f.Error("chunk_bytes",
                   "is not a positive multiple of " + std::to_string(kChunkAlignment));
  RTFT_RETURN_IF_ERROR(ParseMarks(f, &m.marks));
  if (j.contains("write"))
    RTFT_RETURN_IF_ERROR(f.Uint("write", std::numeric_limits<uint64_t>::max(), &m.write_id));
  const json* tensors = nullptr;
  const json* objects = nullptr;
  RTFT_RETURN_IF_ERROR(f.List("tensors", &tensors));
  RTFT_RETURN_IF_ERROR(f.List("objects", &objects));
  std::set<std::string> names;
  for (size_t i = 0; i < tensors->size(); ++i) {
    TensorEntry e;
    RTFT_RETURN_IF_ERROR(ParseTensor(JsonFields((*tensors)[i], Item("tensors", i)),
                                     m.format_version, m.chunk_bytes, &e));
    RTFT_RETURN_IF_ERROR(CheckUnique(&names, e.name, "tensor"));
    m.tensors.push_back(std::move(e));
  }
  names.clear();
  for (size_t i = 0; i < objects->size(); ++i) {
    ObjectEntry e;
    RTFT_RETURN_IF_ERROR(ParseObject(JsonFields((*objects)[i], Item("objects", i)), &e));
    RTFT_RETURN_IF_ERROR(CheckUnique(&names, e.name, "object"));
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
  PutMarks(marks, &j);
  return j.dump(1);
}

StatusOr<GlobalManifest> GlobalManifest::FromJson(const std::string& text) {
  RTFT_ASSIGN_OR_RETURN(json j, Parse(text));
  const JsonFields f(j, "");
  GlobalManifest m;
  RTFT_RETURN_IF_ERROR(
      ParseHead(f, &m.format_version, &m.version, &m.world_size, &m.created_unix_ms));
  RTFT_RETURN_IF_ERROR(ParseMarks(f, &m.marks));
  const json* files = nullptr;
  RTFT_RETURN_IF_ERROR(f.List("files", &files));
  if (files->size() != static_cast<size_t>(m.world_size))
    return Status::DataLoss("global manifest lists " + std::to_string(files->size()) +
                            " files for " + std::to_string(m.world_size) + " ranks");
  std::vector<bool> seen(files->size(), false);
  for (size_t i = 0; i < files->size(); ++i) {
    const JsonFields e(((*files)[i]), Item("files", i));
    GlobalFileEntry entry;
    int64_t rank = 0;
    RTFT_RETURN_IF_ERROR(e.Int("rank", 0, m.world_size - 1, &rank));
    if (seen[static_cast<size_t>(rank)])
      return e.Error("rank", "lists rank " + std::to_string(rank) + " a second time");
    seen[static_cast<size_t>(rank)] = true;
    entry.rank = static_cast<int>(rank);
    RTFT_RETURN_IF_ERROR(e.String("file", &entry.file));
    RTFT_RETURN_IF_ERROR(e.Uint("bytes", std::numeric_limits<uint64_t>::max(), &entry.bytes));
    RTFT_RETURN_IF_ERROR(e.Checksum("manifest_xxh3", &entry.manifest_xxh3));
    m.files.push_back(std::move(entry));
  }
  return m;
}

}  // namespace rtft
