// Restore from versions written by the test fixture: values come back exactly, LATEST and explicit
// versions, objects, and each error names what is wrong; with CUDA, into device memory through
// staging buffers of several sizes.
#include "core/build_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#if RTFT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::FixtureOptions;
using testing::MakeTensor;
using testing::RankState;
using testing::WriteVersion;

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.5f * static_cast<float>(i);
  return v;
}

// A destination like `t` with zeroed memory of its own.
template <typename T>
testing::OwnedTensor<T> Blank(const testing::OwnedTensor<T>& t) {
  return MakeTensor<T>(t.desc.name, t.desc.dtype, t.desc.shape,
                       std::vector<T>(t.storage.size(), T{}), t.desc.shard);
}

struct Fixture {
  testing::OwnedTensor<float> w =
      MakeTensor<float>("model/w", DType::kFloat32, {64, 33}, Iota(64 * 33, 1));
  testing::OwnedTensor<uint16_t> h = MakeTensor<uint16_t>("model/h", DType::kBFloat16, {5},
                                                          {0x3f80, 0xc000, 0x4049, 0x0000, 0x7f80});
  testing::OwnedTensor<int64_t> step = MakeTensor<int64_t>("sched/step", DType::kInt64, {}, {42});
  testing::OwnedTensor<int32_t> none = MakeTensor<int32_t>("empty", DType::kInt32, {0}, {});
  testing::OwnedTensor<double> u =
      MakeTensor<double>("solver/u", DType::kFloat64, {3, 700}, testing::HardDoubles(2100, 7));

  RankState State() const {
    return {{w.desc, h.desc, step.desc, none.desc, u.desc},
            {{"rng", std::string("\x01\x00\x02", 3)}}};
  }
};

TEST(Restore, RoundTripsEveryDtypeAndObjects) {
  TempDir dir;
  Fixture f;
  FixtureOptions small_chunks;
  small_chunks.chunk_bytes = 4096;  // model/w spans three chunks
  ASSERT_TRUE(WriteVersion(dir.path(), 7, 1, {f.State()}, small_chunks).ok());

  auto w = Blank(f.w);
  auto h = Blank(f.h);
  auto step = Blank(f.step);
  auto none = Blank(f.none);
  auto u = Blank(f.u);
  std::string rng;
  CompositeProvider state(0, 0);
  for (const TensorDesc* d : {&w.desc, &h.desc, &step.desc, &none.desc, &u.desc})
    state.AddTensor(*d);
  state.AddObject({"rng", nullptr, [&](const std::string& b) {
                     rng = b;
                     return Status::Ok();
                   }});
  Status s = Restore(dir.path(), {}, state);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(w.storage, f.w.storage);
  EXPECT_EQ(h.storage, f.h.storage);
  EXPECT_EQ(step.storage, f.step.storage);
  // Bit for bit (NaN payloads, -0.0, subnormals), so compared as bytes; 16800 bytes of float64
  // span five 4 KiB chunks.
  ASSERT_EQ(u.storage.size(), f.u.storage.size());
  EXPECT_EQ(std::memcmp(u.storage.data(), f.u.storage.data(), f.u.desc.bytes()), 0);
  EXPECT_EQ(rng, std::string("\x01\x00\x02", 3));
}

// A float64 block restored into a box of another shape: rows 1..2, columns 650..699 of the
// saved [3, 700] tensor, cut across chunk boundaries.
TEST(Restore, Float64BoxOfASavedTensorBitForBit) {
  TempDir dir;
  Fixture f;
  FixtureOptions small_chunks;
  small_chunks.chunk_bytes = 4096;
  ASSERT_TRUE(WriteVersion(dir.path(), 3, 1, {f.State()}, small_chunks).ok());
  auto box = MakeTensor<double>("solver/u", DType::kFloat64, {2, 50}, std::vector<double>(100),
                                ShardCoords{{3, 700}, {1, 650}});
  Status s = Restore(dir.path(), {}, TensorProvider(box.desc));
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(std::memcmp(&box.storage[r * 50], &f.u.storage[(r + 1) * 700 + 650], 50 * 8), 0)
        << "row " << r;
}

TEST(Restore, LatestByDefaultOrTheVersionAsked) {
  TempDir dir;
  auto v1 = MakeTensor<float>("x", DType::kFloat32, {4}, {1, 2, 3, 4});
  auto v2 = MakeTensor<float>("x", DType::kFloat32, {4}, {5, 6, 7, 8});
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {{{v1.desc}, {}}}).ok());
  ASSERT_TRUE(WriteVersion(dir.path(), 2, 1, {{{v2.desc}, {}}}).ok());
  auto out = Blank(v1);
  TensorProvider provider(out.desc);
  ASSERT_TRUE(Restore(dir.path(), {}, provider).ok());
  EXPECT_EQ(out.storage, v2.storage);
  RestoreOptions old;
  old.version = 1;
  ASSERT_TRUE(Restore(dir.path(), old, provider).ok());
  EXPECT_EQ(out.storage, v1.storage);
  auto latest = LatestVersion(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 2u);
}

TEST(Restore, ReplicatedTensorSavedByEveryRank) {
  TempDir dir;
  auto x = MakeTensor<float>("x", DType::kFloat32, {3}, {1, 2, 3});
  ASSERT_TRUE(
      WriteVersion(dir.path(), 1, 3, {{{x.desc}, {}}, {{x.desc}, {}}, {{x.desc}, {}}}).ok());
  auto out = Blank(x);
  ASSERT_TRUE(Restore(dir.path(), {}, TensorProvider(out.desc)).ok());
  EXPECT_EQ(out.storage, x.storage);
  // A shard of it, too: the three identical copies count once.
  auto part = MakeTensor<float>("x", DType::kFloat32, {2}, {0, 0}, ShardCoords{{3}, {1}});
  Status s = Restore(dir.path(), {}, TensorProvider(part.desc));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(part.storage, (std::vector<float>{2, 3}));
}

TEST(Restore, ErrorsNameTheTensorOrObject) {
  TempDir dir;
  Fixture f;
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {f.State()}).ok());

  auto missing = MakeTensor<float>("model/missing", DType::kFloat32, {2}, {0, 0});
  Status s = Restore(dir.path(), {}, TensorProvider(missing.desc));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("'model/missing'"), std::string::npos) << s;

  auto shape = MakeTensor<float>("model/w", DType::kFloat32, {33, 64}, Iota(33 * 64, 0));
  s = Restore(dir.path(), {}, TensorProvider(shape.desc));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'model/w'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[64, 33]"), std::string::npos) << s;

  auto dtype = MakeTensor<uint16_t>("model/h", DType::kFloat16, {5}, std::vector<uint16_t>(5));
  s = Restore(dir.path(), {}, TensorProvider(dtype.desc));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bfloat16"), std::string::npos) << s;

  // Same shape and byte count would not do either: float64 is never read as int64 or float32.
  auto as_int =
      MakeTensor<int64_t>("solver/u", DType::kInt64, {3, 700}, std::vector<int64_t>(2100));
  s = Restore(dir.path(), {}, TensorProvider(as_int.desc));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("float64"), std::string::npos) << s;
  EXPECT_NE(s.message().find("int64"), std::string::npos) << s;
  EXPECT_EQ(as_int.storage, std::vector<int64_t>(2100));

  ObjectProvider object(
      ObjectDesc{"sched/lr", nullptr, [](const std::string&) { return Status::Ok(); }});
  s = Restore(dir.path(), {}, object);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("'sched/lr'"), std::string::npos) << s;

  ObjectProvider refusing(ObjectDesc{
      "rng", nullptr, [](const std::string&) { return Status::InvalidArgument("bad rng state"); }});
  s = Restore(dir.path(), {}, refusing);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("restoring object 'rng'"), std::string::npos) << s;

  RestoreOptions absent;
  absent.version = 9;
  s = Restore(dir.path(), absent, TensorProvider(f.w.desc));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
}

TEST(Restore, IncompleteVersionIsRefused) {
  TempDir dir;
  auto x = MakeTensor<float>("x", DType::kFloat32, {2}, {1, 2});
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {{{x.desc}, {}}}).ok());
  FixtureOptions unfinished;
  unfinished.write_global_manifest = false;
  ASSERT_TRUE(WriteVersion(dir.path(), 2, 1, {{{x.desc}, {}}}, unfinished).ok());
  RestoreOptions v2;
  v2.version = 2;
  auto out = Blank(x);
  Status s = Restore(dir.path(), v2, TensorProvider(out.desc));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("incomplete"), std::string::npos) << s;
  // LATEST still names version 1, which restores.
  EXPECT_TRUE(Restore(dir.path(), {}, TensorProvider(out.desc)).ok());
}

#if RTFT_WITH_CUDA
// Device memory of `bytes` that frees itself.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&data, bytes) != cudaSuccess) data = nullptr;
  }
  ~DeviceBuffer() { cudaFree(data); }
  template <typename T>
  std::vector<T> Read(size_t n) const {
    std::vector<T> back(n);
    EXPECT_EQ(cudaMemcpy(back.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return back;
  }
  void* data = nullptr;
};

TEST(Restore, IntoDeviceMemory) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  Fixture f;
  // model/w is 8448 bytes: nine 1 KiB chunks, the last 256 bytes. Elements 1..3 of model/h go to
  // a second device buffer by the resharding path (assembled in host memory), and sched/step to
  // host memory, in the same restore.
  FixtureOptions small_chunks;
  small_chunks.chunk_bytes = 1024;
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {f.State()}, small_chunks).ok());
  const size_t n = f.w.storage.size();
  // Default (one copy per tensor), two halves of two chunks each, halves of one chunk with room
  // to spare, a single chunk (no overlap), and less than one chunk (grown to one).
  for (uint64_t staging :
       {uint64_t{64} << 20, uint64_t{4096}, uint64_t{3000}, uint64_t{1500}, uint64_t{100}}) {
    SCOPED_TRACE("staging_bytes " + std::to_string(staging));
    DeviceBuffer whole(n * sizeof(float));
    DeviceBuffer middle(3 * sizeof(uint16_t));
    ASSERT_NE(whole.data, nullptr);
    ASSERT_NE(middle.data, nullptr);
    TensorDesc w = f.w.desc;
    w.memory = MemoryKind::kDevice;
    w.data = whole.data;
    TensorDesc h = f.h.desc;
    h.memory = MemoryKind::kDevice;
    h.data = middle.data;
    h.shape = {3};
    h.shard = ShardCoords{{5}, {1}};
    auto step = Blank(f.step);
    CompositeProvider state(0, 0);
    for (const TensorDesc* d : {&w, &h, &step.desc}) state.AddTensor(*d);
    RestoreOptions options;
    options.staging_bytes = staging;
    Status s = Restore(dir.path(), options, state);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(whole.Read<float>(n), f.w.storage);
    EXPECT_EQ(middle.Read<uint16_t>(3),
              std::vector<uint16_t>(f.h.storage.begin() + 1, f.h.storage.begin() + 4));
    EXPECT_EQ(step.storage, f.step.storage);
  }
}

TEST(Restore, IntoDeviceMemoryChecksEveryChunk) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  Fixture f;
  FixtureOptions small_chunks;
  small_chunks.chunk_bytes = 1024;
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {f.State()}, small_chunks).ok());
  const std::string path = RankFilePath(dir.path(), 1, 0);
  auto m = ReadFileManifest(path);
  ASSERT_TRUE(m.ok()) << m.status();
  std::FILE* file = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(file, nullptr);
  std::fseek(file, static_cast<long>(m->FindTensor("model/w")->offset + 5 * 1024 + 7), SEEK_SET);
  std::fputc(0xee, file);
  std::fclose(file);
  DeviceBuffer whole(f.w.storage.size() * sizeof(float));
  ASSERT_NE(whole.data, nullptr);
  TensorDesc want = f.w.desc;
  want.memory = MemoryKind::kDevice;
  want.data = whole.data;
  RestoreOptions options;
  options.staging_bytes = 4096;
  Status s = Restore(dir.path(), options, TensorProvider(want));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("chunk 5 (bytes 5120..6144)"), std::string::npos) << s;
}
#else
TEST(Restore, DeviceMemoryNeedsCuda) {
  TempDir dir;
  auto x = MakeTensor<float>("x", DType::kFloat32, {2}, {1, 2});
  ASSERT_TRUE(WriteVersion(dir.path(), 1, 1, {{{x.desc}, {}}}).ok());
  auto out = Blank(x);
  out.desc.memory = MemoryKind::kDevice;
  Status s = Restore(dir.path(), {}, TensorProvider(out.desc));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("without CUDA"), std::string::npos) << s;
}
#endif

}  // namespace
}  // namespace rtft
