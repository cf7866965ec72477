#include "checkpoint/read/reader.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "core/checksum.h"

namespace rtft {
namespace {

// Offsets and sizes come from a file that may be damaged: add without wrapping around.
bool EndsWithin(uint64_t offset, uint64_t bytes, uint64_t limit) {
  return offset <= limit && bytes <= limit - offset;
}

std::string Range(uint64_t begin, uint64_t end) {
  return "bytes " + std::to_string(begin) + ".." + std::to_string(end);
}

}  // namespace

CheckpointFileReader::CheckpointFileReader(std::string path, std::string json,
                                           FileManifest manifest, std::unique_ptr<File> file,
                                           uint64_t file_size)
    : path_(std::move(path)),
      manifest_json_(std::move(json)),
      manifest_(std::move(manifest)),
      file_(std::move(file)),
      file_size_(file_size) {}

StatusOr<std::unique_ptr<CheckpointFileReader>> CheckpointFileReader::Open(const std::string& path,
                                                                           IoBackend* io,
                                                                           bool follow_symlinks) {
  OpenOptions options;
  options.mode = OpenMode::kReadOnly;
  options.follow_symlinks = follow_symlinks;
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> file, io->Open(path, options));
  int attribute_version = 0;
  RTFT_ASSIGN_OR_RETURN(std::string json, ReadFileManifestJson(file.get(), &attribute_version));
  auto manifest = FileManifest::FromJson(json);
  if (!manifest.ok()) return manifest.status().Annotate(path);
  // The writer derives both from the same dtypes (layout.h): a file where they differ was not
  // written by rt-ft as it is now.
  if (manifest->format_version != attribute_version)
    return Status::DataLoss(path + " is damaged: its root attribute says format version " +
                            std::to_string(attribute_version) + ", its manifest " +
                            std::to_string(manifest->format_version));
  RTFT_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::unique_ptr<CheckpointFileReader> reader(new CheckpointFileReader(
      path, std::move(json), std::move(manifest).value(), std::move(file), size));
  RTFT_RETURN_IF_ERROR(reader->CheckExtents());
  // Tensor bytes are read with O_DIRECT where the file system allows it: restore at disk speed
  // and no page cache filled with a checkpoint nobody reads twice.
  auto direct = io->Reopen(*reader->file_, OpenOptions{OpenMode::kReadOnly, true});
  if (direct.ok() && (*direct)->direct()) reader->direct_ = std::move(direct).value();
  return reader;
}

// HDF5 usually notices a truncated file itself; this catches the rest before any read does.
Status CheckpointFileReader::CheckExtents() const {
  for (const TensorEntry& t : manifest_.tensors) {
    if (t.bytes > 0 && !EndsWithin(t.offset, t.bytes, file_size_))
      return Status::DataLoss("tensor '" + t.name + "' in " + path_ + ": file truncated (" +
                              Range(t.offset, t.offset + t.bytes) + " past its end at " +
                              std::to_string(file_size_) + ")");
  }
  for (const ObjectEntry& o : manifest_.objects) {
    if (o.bytes > 0 && !EndsWithin(o.offset, o.bytes, file_size_))
      return Status::DataLoss("object '" + o.name + "' in " + path_ + ": file truncated (" +
                              Range(o.offset, o.offset + o.bytes) + " past its end at " +
                              std::to_string(file_size_) + ")");
  }
  return Status::Ok();
}

uint64_t CheckpointFileReader::data_bytes() const {
  uint64_t total = 0;
  for (const TensorEntry& t : manifest_.tensors) total += t.bytes;
  for (const ObjectEntry& o : manifest_.objects) total += o.bytes;
  return total;
}

Status CheckpointFileReader::ReadAt(uint64_t offset, void* dst, uint64_t bytes) const {
  if (bytes == 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(io_mu_);
  return file_->Read({IoRequest{offset, dst, static_cast<size_t>(bytes)}});
}

Status CheckpointFileReader::ReadData(uint64_t offset, void* dst, uint64_t bytes) const {
  uint64_t body = 0;
  if (direct_ && offset % kDirectIoAlignment == 0 &&
      reinterpret_cast<uintptr_t>(dst) % kDirectIoAlignment == 0)
    body = bytes / kDirectIoAlignment * kDirectIoAlignment;
  if (body > 0) {
    // In pieces of kStreamBytes, submitted together: with io_uring they are in flight at once,
    // as many as the ring holds, where one large request would keep the disk at depth one.
    std::vector<IoRequest> pieces;
    pieces.reserve(static_cast<size_t>((body + kStreamBytes - 1) / kStreamBytes));
    for (uint64_t at = 0; at < body; at += kStreamBytes)
      pieces.push_back(IoRequest{offset + at, static_cast<char*>(dst) + at,
                                 static_cast<size_t>(std::min(kStreamBytes, body - at))});
    std::lock_guard<std::mutex> lock(direct_mu_);
    RTFT_RETURN_IF_ERROR(direct_->Read(pieces));
  }
  return ReadAt(offset + body, static_cast<char*>(dst) + body, bytes - body);
}

uint64_t CheckpointFileReader::ChunkSize(const TensorEntry& entry, uint64_t chunk) const {
  const uint64_t begin = chunk * manifest_.chunk_bytes;
  return begin < entry.bytes ? std::min(manifest_.chunk_bytes, entry.bytes - begin) : 0;
}

Status CheckpointFileReader::ReadTensorChunk(const TensorEntry& entry, uint64_t chunk, void* dst,
                                             bool verify) const {
  if (chunk >= ChunkCount(entry.bytes, manifest_.chunk_bytes) || chunk >= entry.xxh3.size())
    return Status::InvalidArgument("tensor '" + entry.name + "' in " + path_ + " has no chunk " +
                                   std::to_string(chunk));
  const uint64_t begin = chunk * manifest_.chunk_bytes;
  const uint64_t end = begin + ChunkSize(entry, chunk);
  Status read = ReadData(entry.offset + begin, dst, end - begin);
  if (!read.ok()) return read.Annotate("tensor '" + entry.name + "' in " + path_);
  return verify ? CheckChunk(entry, chunk, dst) : Status::Ok();
}

Status CheckpointFileReader::CheckChunk(const TensorEntry& entry, uint64_t chunk,
                                        const void* data) const {
  if (chunk >= entry.xxh3.size())
    return Status::InvalidArgument("tensor '" + entry.name + "' in " + path_ + " has no chunk " +
                                   std::to_string(chunk));
  const uint64_t begin = chunk * manifest_.chunk_bytes;
  const uint64_t end = begin + ChunkSize(entry, chunk);
  if (Xxh3(data, end - begin) != entry.xxh3[chunk])
    return Status::DataLoss("tensor '" + entry.name + "' in " + path_ +
                            ": checksum mismatch in chunk " + std::to_string(chunk) + " (" +
                            Range(begin, end) + ")");
  return Status::Ok();
}

Status CheckpointFileReader::ReadTensor(const std::string& name, void* dst, uint64_t bytes,
                                        bool verify, const ChunkCallback& on_chunk) const {
  const TensorEntry* entry = manifest_.FindTensor(name);
  if (!entry) return Status::NotFound("tensor '" + name + "' is not in " + path_);
  if (entry->bytes != bytes)
    return Status::InvalidArgument("tensor '" + name + "' in " + path_ + " has " +
                                   std::to_string(entry->bytes) + " bytes, not " +
                                   std::to_string(bytes));
  return ReadTensor(*entry, dst, verify, on_chunk);
}

Status CheckpointFileReader::ReadTensor(const TensorEntry& entry, void* dst, bool verify,
                                        const ChunkCallback& on_chunk) const {
  const uint64_t chunks = ChunkCount(entry.bytes, manifest_.chunk_bytes);
  for (uint64_t c = 0; c < chunks; ++c) {
    char* at = static_cast<char*>(dst) + c * manifest_.chunk_bytes;
    RTFT_RETURN_IF_ERROR(ReadTensorChunk(entry, c, at, verify));
    if (on_chunk) on_chunk(ChunkSize(entry, c));
  }
  return Status::Ok();
}

StatusOr<uint64_t> CheckpointFileReader::HashAt(uint64_t offset, uint64_t bytes) const {
  // Page-aligned, so that aligned pieces go through O_DIRECT (ReadData).
  const size_t pages = static_cast<size_t>(
      (std::min(bytes, kStreamBytes) + kDirectIoAlignment - 1) / kDirectIoAlignment);
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(
          std::aligned_alloc(kDirectIoAlignment, std::max<size_t>(pages, 1) * kDirectIoAlignment)),
      &std::free);
  if (!buffer) return Status::ResourceExhausted("no memory for a verification buffer");
  Xxh3Hasher hasher;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(bytes - done, kStreamBytes);
    RTFT_RETURN_IF_ERROR(ReadData(offset + done, buffer.get(), n));
    hasher.Update(buffer.get(), n);
    done += n;
  }
  return hasher.Digest();
}

Status CheckpointFileReader::VerifyTensorChunk(const TensorEntry& entry, uint64_t chunk) const {
  if (chunk >= ChunkCount(entry.bytes, manifest_.chunk_bytes) || chunk >= entry.xxh3.size())
    return Status::InvalidArgument("tensor '" + entry.name + "' in " + path_ + " has no chunk " +
                                   std::to_string(chunk));
  const uint64_t begin = chunk * manifest_.chunk_bytes;
  const uint64_t end = begin + ChunkSize(entry, chunk);
  StatusOr<uint64_t> sum = HashAt(entry.offset + begin, end - begin);
  if (!sum.ok()) return sum.status().Annotate("tensor '" + entry.name + "' in " + path_);
  if (*sum != entry.xxh3[chunk])
    return Status::DataLoss("tensor '" + entry.name + "' in " + path_ +
                            ": checksum mismatch in chunk " + std::to_string(chunk) + " (" +
                            Range(begin, end) + ")");
  return Status::Ok();
}

Status CheckpointFileReader::VerifyTensor(const TensorEntry& entry,
                                          const ChunkCallback& on_chunk) const {
  const uint64_t chunks = ChunkCount(entry.bytes, manifest_.chunk_bytes);
  for (uint64_t c = 0; c < chunks; ++c) {
    RTFT_RETURN_IF_ERROR(VerifyTensorChunk(entry, c));
    if (on_chunk) on_chunk(ChunkSize(entry, c));
  }
  return Status::Ok();
}

Status CheckpointFileReader::ReadTensorBytes(const TensorEntry& entry, uint64_t begin, void* dst,
                                             uint64_t bytes) const {
  if (!EndsWithin(begin, bytes, entry.bytes))
    return Status::InvalidArgument("tensor '" + entry.name + "' in " + path_ + " has no " +
                                   Range(begin, begin + bytes));
  Status read = ReadData(entry.offset + begin, dst, bytes);
  if (!read.ok()) return read.Annotate("tensor '" + entry.name + "' in " + path_);
  return Status::Ok();
}

Status CheckpointFileReader::VerifyObject(const ObjectEntry& entry) const {
  StatusOr<uint64_t> sum = HashAt(entry.offset, entry.bytes);
  if (!sum.ok()) return sum.status().Annotate("object '" + entry.name + "' in " + path_);
  if (*sum != entry.xxh3)
    return Status::DataLoss("object '" + entry.name + "' in " + path_ + ": checksum mismatch");
  return Status::Ok();
}

StatusOr<std::string> CheckpointFileReader::ReadObject(const std::string& name, bool verify) const {
  const ObjectEntry* entry = manifest_.FindObject(name);
  if (!entry) return Status::NotFound("object '" + name + "' is not in " + path_);
  return ReadObject(*entry, verify);
}

StatusOr<std::string> CheckpointFileReader::ReadObject(const ObjectEntry& entry,
                                                       bool verify) const {
  std::string bytes(entry.bytes, '\0');
  Status read = ReadAt(entry.offset, bytes.data(), bytes.size());
  if (!read.ok()) return read.Annotate("object '" + entry.name + "' in " + path_);
  if (verify && Xxh3(bytes.data(), bytes.size()) != entry.xxh3)
    return Status::DataLoss("object '" + entry.name + "' in " + path_ + ": checksum mismatch");
  return bytes;
}

Status CheckpointFileReader::VerifyAll(const ChunkCallback& on_chunk) const {
  for (const TensorEntry& t : manifest_.tensors) RTFT_RETURN_IF_ERROR(VerifyTensor(t, on_chunk));
  for (const ObjectEntry& o : manifest_.objects) {
    RTFT_RETURN_IF_ERROR(VerifyObject(o));
    if (on_chunk) on_chunk(o.bytes);
  }
  return Status::Ok();
}

}  // namespace rtft
