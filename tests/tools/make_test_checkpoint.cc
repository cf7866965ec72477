// Test-only: writes a small, known checkpoint directory for the rtft-ckpt script tests, with the
// reader tests' fixture (no checkpoint engine involved).
//   make-test-checkpoint DIR            v1 and v2 complete (LATEST = 2), v3 incomplete
//   make-test-checkpoint DIR --flip T   also flips one byte of tensor T in v2's rank 0 file
//   make-test-checkpoint DIR --big N    only v1, one rank holding "big", uint8 [N] = i % 251
//   make-test-checkpoint DIR --float64  only v1 (format version 2), two ranks: solver/u float64
//                                       [4, 3] in row halves (kFloat64Values), solver/dt 0.001
// Every rank holds model/w float32 [2, 3] = 1.5 -2 3 / 4 5 6.25, model/h bfloat16
// [4] = 1 -2 3.140625 0, model/f16 float16 [2] = 1 -2.5, step int64 scalar 42, opt/m float32
// [4] at [4 * rank] of [8] with values 4 * rank + i, and an object "rng".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"

namespace rtft {
namespace {

Status FlipByte(const std::string& path, const std::string& tensor) {
  RTFT_ASSIGN_OR_RETURN(FileManifest m, ReadFileManifest(path));
  const TensorEntry* t = m.FindTensor(tensor);
  if (!t) return Status::NotFound("no tensor " + tensor);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  if (!f) return Status::IoError("cannot open " + path);
  std::fseek(f, static_cast<long>(t->offset), SEEK_SET);
  int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(t->offset), SEEK_SET);
  std::fputc(c ^ 0x01, f);
  std::fclose(f);
  return Status::Ok();
}

Status Make(const std::string& dir, const std::string& flip) {
  using testing::MakeTensor;
  auto w = MakeTensor<float>("model/w", DType::kFloat32, {2, 3}, {1.5f, -2, 3, 4, 5, 6.25f});
  auto h = MakeTensor<uint16_t>("model/h", DType::kBFloat16, {4}, {0x3f80, 0xc000, 0x4049, 0});
  auto f16 = MakeTensor<uint16_t>("model/f16", DType::kFloat16, {2}, {0x3c00, 0xc100});
  auto step = MakeTensor<int64_t>("step", DType::kInt64, {}, {42});
  auto m0 = MakeTensor<float>("opt/m", DType::kFloat32, {4}, {0, 1, 2, 3}, ShardCoords{{8}, {0}});
  auto m1 = MakeTensor<float>("opt/m", DType::kFloat32, {4}, {4, 5, 6, 7}, ShardCoords{{8}, {4}});
  std::vector<testing::RankState> ranks = {
      {{w.desc, h.desc, f16.desc, step.desc, m0.desc}, {{"rng", "seed=1"}}},
      {{w.desc, h.desc, f16.desc, step.desc, m1.desc}, {{"rng", "seed=2"}}}};
  testing::FixtureOptions options;
  options.chunk_bytes = 4096;
  RTFT_RETURN_IF_ERROR(testing::WriteVersion(dir, 1, 2, ranks, options));
  RTFT_RETURN_IF_ERROR(testing::WriteVersion(dir, 2, 2, ranks, options));
  options.write_global_manifest = false;
  RTFT_RETURN_IF_ERROR(testing::WriteVersion(dir, 3, 2, ranks, options));
  if (!flip.empty()) RTFT_RETURN_IF_ERROR(FlipByte(RankFilePath(dir, 2, 0), flip));
  return Status::Ok();
}

// One large tensor, for the tools' bounded-memory checks.
Status MakeBig(const std::string& dir, uint64_t bytes) {
  std::vector<uint8_t> values(bytes);
  for (uint64_t i = 0; i < bytes; ++i) values[i] = static_cast<uint8_t>(i % 251);
  auto t = testing::MakeTensor<uint8_t>("big", DType::kUInt8, {static_cast<int64_t>(bytes)},
                                        std::move(values));
  testing::FixtureOptions options;
  options.chunk_bytes = 64 << 20;
  return testing::WriteVersion(dir, 1, 1, {{{t.desc}, {}}}, options);
}

// Values a float32 detour would change (0.30000000000000004, 1e-300, pi to 16 digits, the largest
// double) and edge cases (-0, the smallest subnormal, infinity), as rtft-ckpt cat prints them.
constexpr double kFloat64Values[12] = {0.1,
                                       -2.5,
                                       1e-300,
                                       3.141592653589793,
                                       -0.0,
                                       5e-324,
                                       1.7976931348623157e308,
                                       0.30000000000000004,
                                       -1234567.890625,
                                       2.5,
                                       HUGE_VAL,
                                       -HUGE_VAL};

Status MakeFloat64(const std::string& dir) {
  using testing::MakeTensor;
  auto u0 = MakeTensor<double>("solver/u", DType::kFloat64, {2, 3},
                               std::vector<double>(kFloat64Values, kFloat64Values + 6),
                               ShardCoords{{4, 3}, {0, 0}});
  auto u1 = MakeTensor<double>("solver/u", DType::kFloat64, {2, 3},
                               std::vector<double>(kFloat64Values + 6, kFloat64Values + 12),
                               ShardCoords{{4, 3}, {2, 0}});
  auto dt = MakeTensor<double>("solver/dt", DType::kFloat64, {}, {0.001});
  testing::FixtureOptions options;
  options.chunk_bytes = 16;  // several chunks per shard
  return testing::WriteVersion(dir, 1, 2, {{{u0.desc, dt.desc}, {}}, {{u1.desc, dt.desc}, {}}},
                               options);
}

}  // namespace
}  // namespace rtft

int main(int argc, char** argv) {
  const bool flip = argc == 4 && std::strcmp(argv[2], "--flip") == 0;
  const bool big = argc == 4 && std::strcmp(argv[2], "--big") == 0;
  const bool float64 = argc == 3 && std::strcmp(argv[2], "--float64") == 0;
  if (argc != 2 && !flip && !big && !float64) {
    std::fprintf(stderr,
                 "usage: make-test-checkpoint DIR [--flip TENSOR | --big BYTES | --float64]\n");
    return 2;
  }
  rtft::Status s = big       ? rtft::MakeBig(argv[1], std::strtoull(argv[3], nullptr, 10))
                   : float64 ? rtft::MakeFloat64(argv[1])
                             : rtft::Make(argv[1], flip ? argv[3] : "");
  if (!s.ok()) {
    std::fprintf(stderr, "make-test-checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
