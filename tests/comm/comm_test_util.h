// Helpers of the communicator tests: ranks as threads of one process meeting in an in-process
// store, deterministic inputs, and reference results computed here, element by element, in the
// reduction order docs/comm.md specifies (independently of src/comm/).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "rtft/comm.h"

namespace rtft::comm::test {

#define RTFT_REQUIRE_GLOO()                                                  \
  do {                                                                       \
    if (!::rtft::CommBackendAvailable(::rtft::CommBackend::kGloo))           \
      GTEST_SKIP() << "this build has no Gloo backend (RTFT_WITH_GLOO=OFF)"; \
  } while (0)

// Runs fn(rank) on `n` threads and joins them.
inline void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

inline CommOptions Options(int rank, int n, CommStore* store, uint64_t epoch = 1,
                           const std::string& name = "test") {
  CommOptions o;
  o.backend = CommBackend::kGloo;
  o.rank = rank;
  o.world_size = n;
  o.epoch = epoch;
  o.name = name;
  o.store = store;
  o.host = "127.0.0.1";
  o.create_timeout = std::chrono::milliseconds(20000);
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// Creates a communicator on every rank (threads); fails the test on any error.
inline std::vector<std::unique_ptr<Communicator>> CreateAll(int n, CommStore* store,
                                                            uint64_t epoch = 1,
                                                            const std::string& name = "test") {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> errors(n);
  RunRanks(n, [&](int r) {
    auto c = Communicator::Create(Options(r, n, store, epoch, name));
    if (c.ok()) {
      comms[r] = std::move(*c);
    } else {
      errors[r] = c.status();
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r];
  return comms;
}

// A deterministic value for element i of rank r (varied magnitudes, so that the reduction order
// shows in the floating-point result).
inline double Value(int r, size_t i, DType d) {
  uint64_t x = (static_cast<uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  switch (d) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16: {
      const double mant = static_cast<double>(x % 2000001) / 1000000.0 - 1.0;
      const int exp = static_cast<int>((x >> 24) % 7) - 3;
      return mant * std::pow(10.0, exp);
    }
    case DType::kFloat64: {
      // All 52 mantissa bits and exponents from 2^-40 to 2^40: nearly every addition rounds, so
      // another order of the ranks' terms gives other bits.
      const double mant = 1.0 + static_cast<double>(x >> 12) * 0x1p-52;
      const int exp = static_cast<int>((x >> 4) % 81) - 40;
      return std::ldexp((x & 1) ? -mant : mant, exp);
    }
    default:
      return static_cast<double>(static_cast<int64_t>(x % 512) - 256);
  }
}

// Element access by dtype; 16-bit floats through rt-ft's shared conversions.
inline void Store(void* p, size_t i, DType d, double v) {
  switch (d) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBf16(static_cast<float>(v));
      break;
    case DType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
  }
}

inline std::vector<char> Input(int r, size_t count, DType d) {
  std::vector<char> v(count * DTypeSize(d) + 1);
  for (size_t i = 0; i < count; ++i) Store(v.data(), i, d, Value(r, i, d));
  v.resize(count * DTypeSize(d));
  return v;
}

// a op b for one element, rounded as the dtype rounds.
template <typename T>
T Op(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    default:
      return static_cast<T>(a + b);
  }
}

inline void Combine(DType d, ReduceOp op, const void* a, const void* b, void* out, size_t i) {
  switch (d) {
    case DType::kFloat32:
      static_cast<float*>(out)[i] =
          Op(op, static_cast<const float*>(a)[i], static_cast<const float*>(b)[i]);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(out)[i] =
          FloatToHalf(Op(op, HalfToFloat(static_cast<const uint16_t*>(a)[i]),
                         HalfToFloat(static_cast<const uint16_t*>(b)[i])));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(out)[i] =
          FloatToBf16(Op(op, Bf16ToFloat(static_cast<const uint16_t*>(a)[i]),
                         Bf16ToFloat(static_cast<const uint16_t*>(b)[i])));
      break;
    case DType::kInt8:
      static_cast<int8_t*>(out)[i] =
          Op(op, static_cast<const int8_t*>(a)[i], static_cast<const int8_t*>(b)[i]);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(out)[i] =
          Op(op, static_cast<const int32_t*>(a)[i], static_cast<const int32_t*>(b)[i]);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(out)[i] =
          Op(op, static_cast<const int64_t*>(a)[i], static_cast<const int64_t*>(b)[i]);
      break;
    case DType::kUInt8:
      static_cast<uint8_t*>(out)[i] =
          Op(op, static_cast<const uint8_t*>(a)[i], static_cast<const uint8_t*>(b)[i]);
      break;
    case DType::kFloat64:
      static_cast<double*>(out)[i] =
          Op(op, static_cast<const double*>(a)[i], static_cast<const double*>(b)[i]);
      break;
  }
}

inline void Divide(DType d, void* p, size_t i, int n) {
  switch (d) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] /= static_cast<float>(n);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] =
          FloatToHalf(HalfToFloat(static_cast<uint16_t*>(p)[i]) / static_cast<float>(n));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] =
          FloatToBf16(Bf16ToFloat(static_cast<uint16_t*>(p)[i]) / static_cast<float>(n));
      break;
    case DType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int8_t*>(p)[i] / n);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] /= n;
      break;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] /= n;
      break;
    case DType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<uint8_t*>(p)[i] / n);
      break;
    case DType::kFloat64:
      static_cast<double*>(p)[i] /= static_cast<double>(n);
      break;
  }
}

// Block b of `count` elements over n ranks: the first count % n blocks get one more element.
inline std::pair<size_t, size_t> EvenBlock(size_t count, int n, int b) {
  size_t start = 0;
  for (int k = 0; k < b; ++k) start += count / n + (static_cast<size_t>(k) < count % n ? 1 : 0);
  return {start, count / n + (static_cast<size_t>(b) < count % n ? 1 : 0)};
}

// Element i of block c reduced in ring order: ((x[c+1] op x[c+2]) op ...) op x[c], / n for avg.
inline void ReduceElement(const std::vector<std::vector<char>>& in, DType d, ReduceOp op, int c,
                          size_t i, void* out, size_t out_i) {
  const int n = static_cast<int>(in.size());
  const size_t es = DTypeSize(d);
  std::vector<char> acc(es);
  std::memcpy(acc.data(), in[(c + 1) % n].data() + i * es, es);
  for (int k = 2; k <= n; ++k)
    Combine(d, op, acc.data(), in[(c + k) % n].data() + i * es, acc.data(), 0);
  if (op == ReduceOp::kAvg && n > 1) Divide(d, acc.data(), 0, n);
  std::memcpy(static_cast<char*>(out) + out_i * es, acc.data(), es);
}

inline std::vector<char> ReferenceAllReduce(const std::vector<std::vector<char>>& in, size_t count,
                                            DType d, ReduceOp op) {
  const int n = static_cast<int>(in.size());
  std::vector<char> out(count * DTypeSize(d));
  for (int c = 0; c < n; ++c) {
    auto [start, len] = EvenBlock(count, n, c);
    for (size_t i = start; i < start + len; ++i) ReduceElement(in, d, op, c, i, out.data(), i);
  }
  return out;
}

}  // namespace rtft::comm::test
