// Reading one rank file of a checkpoint back: the manifest through HDF5 (layout.h), then tensor
// and object bytes through the I/O backend at the manifest's offsets, every chunk checked against
// its XXH3. Restore, VerifyVersion and rtft-ckpt read files only through this class.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/manifest.h"
#include "rtft/status.h"

namespace rtft {

class CheckpointFileReader {
 public:
  // Called after each verified chunk with the number of bytes it held; may be called from
  // several threads at once when the caller reads from several.
  using ChunkCallback = std::function<void(uint64_t bytes)>;

  // Reads and checks the manifest of `path` (InvalidArgument: not an rt-ft checkpoint; DataLoss:
  // damaged or truncated; Unimplemented: a newer format) and opens the file for reading through
  // `io`, which must outlive the reader. The file is opened once, as a regular file (a symbolic
  // link only with `follow_symlinks`: a path the user named), and everything, HDF5's reads
  // included, is read through that descriptor.
  static StatusOr<std::unique_ptr<CheckpointFileReader>> Open(const std::string& path,
                                                              IoBackend* io,
                                                              bool follow_symlinks = false);

  const std::string& path() const { return path_; }
  const FileManifest& manifest() const { return manifest_; }
  // The manifest exactly as stored; the global manifest holds its XXH3.
  const std::string& manifest_json() const { return manifest_json_; }
  uint64_t file_size() const { return file_size_; }
  // Bytes of tensor and object data (what VerifyAll reads).
  uint64_t data_bytes() const;

  // Tensors are stored and checked in chunks: chunk c of a tensor is the ChunkSize(entry, c)
  // bytes at c * chunk_bytes() (the last one may be shorter), each with its own XXH3.
  uint64_t chunk_bytes() const { return manifest_.chunk_bytes; }
  uint64_t ChunkSize(const TensorEntry& entry, uint64_t chunk) const;
  // Reads chunk `chunk` of a tensor into `dst` (ChunkSize bytes), so callers can stream a tensor
  // through a buffer smaller than it; with `verify`, a chunk whose XXH3 differs is a DataLoss
  // naming the tensor, the file, the chunk and its byte range. InvalidArgument past the last
  // chunk. Safe to call from several threads at once.
  Status ReadTensorChunk(const TensorEntry& entry, uint64_t chunk, void* dst,
                         bool verify = true) const;
  // Reads a whole tensor into `dst` (`bytes` must be its size) with ReadTensorChunk, chunk by
  // chunk. Safe to call from several threads at once.
  Status ReadTensor(const std::string& name, void* dst, uint64_t bytes, bool verify = true,
                    const ChunkCallback& on_chunk = {}) const;
  Status ReadTensor(const TensorEntry& entry, void* dst, bool verify = true,
                    const ChunkCallback& on_chunk = {}) const;
  // Checks one chunk's checksum without keeping its bytes: it is read in pieces of at most
  // kStreamBytes, so memory stays bounded whatever chunk size the file declares.
  Status VerifyTensorChunk(const TensorEntry& entry, uint64_t chunk) const;
  // Checks a tensor's checksums without keeping its bytes (VerifyTensorChunk, chunk by chunk).
  Status VerifyTensor(const TensorEntry& entry, const ChunkCallback& on_chunk = {}) const;
  // Reads `bytes` of a tensor from `begin` into `dst` without checking anything (the caller
  // verified the chunks holding them); InvalidArgument past the tensor's end.
  Status ReadTensorBytes(const TensorEntry& entry, uint64_t begin, void* dst, uint64_t bytes) const;
  // Checks an object's checksum without keeping its bytes (read in bounded pieces).
  Status VerifyObject(const ObjectEntry& entry) const;
  // A serialized object; NotFound when the file has none of that name.
  StatusOr<std::string> ReadObject(const std::string& name, bool verify = true) const;
  StatusOr<std::string> ReadObject(const ObjectEntry& entry, bool verify = true) const;
  // Reads every tensor and object of the file and checks every checksum, in bounded memory.
  Status VerifyAll(const ChunkCallback& on_chunk = {}) const;

  // The largest piece a verification reads at once.
  static constexpr uint64_t kStreamBytes = 8ull << 20;

 private:
  CheckpointFileReader(std::string path, std::string json, FileManifest manifest,
                       std::unique_ptr<File> file, uint64_t file_size);
  Status CheckExtents() const;
  Status ReadAt(uint64_t offset, void* dst, uint64_t bytes) const;
  // XXH3 of `bytes` at `offset`, read in pieces of at most kStreamBytes.
  StatusOr<uint64_t> HashAt(uint64_t offset, uint64_t bytes) const;

  std::string path_;
  std::string manifest_json_;
  FileManifest manifest_;
  std::unique_ptr<File> file_;
  uint64_t file_size_;
  // A File is not promised to be safe for concurrent calls (an io_uring file owns one ring).
  mutable std::mutex io_mu_;
};

}  // namespace rtft
