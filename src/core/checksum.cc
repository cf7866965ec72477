#include "core/checksum.h"

#include <xxhash.h>

#include "core/build_config.h"
#if RTFT_HAVE_XXH_DISPATCH
// Replaces XXH3_64bits and XXH3_64bits_update with the library's variants that pick SSE2, AVX2
// or AVX-512 for this CPU at run time (the plain ones are built for SSE2): same results, about
// three times the speed on data in cache.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "core/thread_pool.h"

namespace rtft {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx"))) void ZeroUpperAvx() { _mm256_zeroupper(); }
#endif

// The library's AVX2 and AVX-512 code returns without VZEROUPPER: the upper halves of the
// calling thread's vector registers stay dirty, and on some CPUs every legacy-SSE instruction
// after that (code built for baseline x86-64: an application's, ours) runs several times slower
// until something clears them. Measured on the 2-core machine's EPYC: an SSE matrix product 7.5x
// slower after one XXH3 call, which made the first step after every recovery (the snapshot is
// verified on the training thread) take 0.6 s instead of 0.22 s. Every call into the library
// here ends with this.
void ClearUpperVectorState() {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx) ZeroUpperAvx();
#endif
}

}  // namespace

uint64_t Xxh3(const void* data, size_t bytes) {
  const uint64_t h = XXH3_64bits(data, bytes);
  ClearUpperVectorState();
  return h;
}

struct Xxh3Hasher::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Hasher::Xxh3Hasher() : state_(new State) {
  RTFT_CHECK(state_->s != nullptr);
  XXH3_64bits_reset(state_->s);
}
Xxh3Hasher::~Xxh3Hasher() = default;

void Xxh3Hasher::Update(const void* data, size_t bytes) {
  XXH3_64bits_update(state_->s, data, bytes);
  ClearUpperVectorState();
}
uint64_t Xxh3Hasher::Digest() const {
  const uint64_t h = XXH3_64bits_digest(state_->s);
  ClearUpperVectorState();
  return h;
}

uint64_t ChunkedXxh3(const void* data, size_t bytes, ThreadPool* pool) {
  const char* p = static_cast<const char*>(data);
  const size_t chunks = (bytes + kChecksumChunk - 1) / kChecksumChunk;
  std::vector<uint64_t> digests(chunks);
  auto one = [&](size_t i) {
    const size_t at = i * kChecksumChunk;
    digests[i] = Xxh3(p + at, std::min(kChecksumChunk, bytes - at));
  };
  if (pool != nullptr && chunks > 1) {
    pool->ParallelFor(chunks, one);
  } else {
    for (size_t i = 0; i < chunks; ++i) one(i);
  }
  return Xxh3(digests.data(), digests.size() * sizeof(uint64_t));
}

void ChunkedXxh3Hasher::Update(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t n = std::min(bytes, kChecksumChunk - in_chunk_);
    chunk_->Update(p, n);
    in_chunk_ += n;
    p += n;
    bytes -= n;
    if (in_chunk_ == kChecksumChunk) {
      digests_.push_back(chunk_->Digest());
      chunk_ = std::make_unique<Xxh3Hasher>();
      in_chunk_ = 0;
    }
  }
}

uint64_t ChunkedXxh3Hasher::Digest() const {
  std::vector<uint64_t> all = digests_;
  if (in_chunk_ > 0) all.push_back(chunk_->Digest());
  return Xxh3(all.data(), all.size() * sizeof(uint64_t));
}

std::string ChecksumToHex(uint64_t checksum) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(checksum));
  return buf;
}

bool ChecksumFromHex(const std::string& hex, uint64_t* checksum) {
  if (hex.size() != 16) return false;
  uint64_t v = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *checksum = v;
  return true;
}

}  // namespace rtft
