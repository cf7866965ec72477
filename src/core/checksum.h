// XXH3-64 checksums of checkpoint data (xxHash library). Stored in manifests as 16 lowercase
// hex digits so that any xxhash implementation can recompute them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rtft {

uint64_t Xxh3(const void* data, size_t bytes);

// Incremental XXH3-64 over data that arrives in pieces.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A checksum that can be computed in parallel: the XXH3 of the XXH3s of the data's consecutive
// kChecksumChunk-byte chunks (the last one shorter), the same value whether computed at once
// (ChunkedXxh3, its chunks spread over `pool` when one is given) or piece by piece as the data
// arrives (ChunkedXxh3Hasher). The L1 snapshot's checksums (docs/protect.md, "Levels").
constexpr size_t kChecksumChunk = size_t{64} << 20;
class ThreadPool;
uint64_t ChunkedXxh3(const void* data, size_t bytes, ThreadPool* pool = nullptr);
class ChunkedXxh3Hasher {
 public:
  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  std::unique_ptr<Xxh3Hasher> chunk_ = std::make_unique<Xxh3Hasher>();
  size_t in_chunk_ = 0;  // bytes hashed into chunk_
  std::vector<uint64_t> digests_;
};

std::string ChecksumToHex(uint64_t checksum);
// False when `hex` is not 16 hex digits.
bool ChecksumFromHex(const std::string& hex, uint64_t* checksum);

}  // namespace rtft
