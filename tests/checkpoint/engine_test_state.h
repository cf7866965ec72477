// What the engine tests share (engine_test.cc, engine_commit_test.cc): the I/O backend under
// test (RTFT_TEST_IO: each suite runs once per backend, tests/checkpoint/CMakeLists.txt), small
// options that make capture wait for the flush, and a training-like state.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "rtft/checkpoint.h"

namespace rtft {

inline bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline std::string TestIo() {
  const char* io = std::getenv("RTFT_TEST_IO");
  return io && *io ? io : "posix";
}

inline CheckpointOptions SmallOptions(const std::string& dir) {
  CheckpointOptions o;
  o.dir = dir;
  o.pool_bytes = 256 << 10;  // four chunks: capture must wait for the flush (back-pressure)
  o.chunk_bytes = 64 << 10;
  o.flush_threads = 3;
  o.capture_threads = 2;
  // The engine tests run once per backend (tests/checkpoint/CMakeLists.txt sets RTFT_TEST_IO).
  o.io_backend = TestIo();
  return o;
}

inline std::unique_ptr<CheckpointEngine> MakeEngine(const CheckpointOptions& o) {
  auto e = CheckpointEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Rank 0's and rank 1's engines of a world of two, with `o`'s other options.
inline std::pair<std::unique_ptr<CheckpointEngine>, std::unique_ptr<CheckpointEngine>> MakeTwoRanks(
    CheckpointOptions o) {
  o.world_size = 2;
  o.rank = 0;
  CheckpointOptions o1 = o;
  o1.rank = 1;
  return {MakeEngine(o), MakeEngine(o1)};
}

// A training-like state: a large tensor split into chunks, many small tensors coalesced, a bf16
// tensor with an odd byte count, an empty tensor and two objects.
struct TrainState {
  std::vector<float> big = Iota(300000, 1);  // 1.2 MB: 19 chunks, odd tail
  std::vector<std::vector<float>> small;
  std::vector<uint16_t> bf16 = std::vector<uint16_t>(777, 0x3f80);
  std::vector<float> empty;
  int64_t step = 41;
  CompositeProvider provider{/*small_tensor_bytes=*/8192, /*group_bytes=*/64 << 10};

  TrainState() {
    provider.AddTensor(HostTensor("model/big", &big));
    for (int i = 0; i < 50; ++i) {
      small.push_back(Iota(100 + i, static_cast<float>(i)));
    }
    for (int i = 0; i < 50; ++i)
      provider.AddTensor(HostTensor("model/small" + std::to_string(i), &small[i]));
    TensorDesc b;
    b.name = "opt/bf16";
    b.dtype = DType::kBFloat16;
    b.shape = {7, 111};
    b.data = bf16.data();
    provider.AddTensor(b);
    TensorDesc e = HostTensor("empty", &empty);
    e.data = nullptr;
    provider.AddTensor(e);
    provider.AddObject(
        {"step", [this] { return StatusOr<std::string>(std::to_string(step)); }, nullptr});
    provider.AddObject(
        {"rng", [] { return StatusOr<std::string>(std::string(5000, 'r')); }, nullptr});
  }
};

}  // namespace rtft
