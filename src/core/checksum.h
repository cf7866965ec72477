// XXH3-64 checksums of checkpoint data (xxHash library). Stored in manifests as 16 lowercase
// hex digits so that any xxhash implementation can recompute them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

std::string ChecksumToHex(uint64_t checksum);
// False when `hex` is not 16 hex digits.
bool ChecksumFromHex(const std::string& hex, uint64_t* checksum);

}  // namespace rtft
