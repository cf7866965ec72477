// The CUDA capture and restore paths on a real GPU: device tensors are checkpointed through the
// copy stream into the pinned pool, checked byte for byte in the file, and restored into device
// memory. Skips where there is no CUDA build or no device.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "checkpoint/capture/device_copy.h"
#include "checkpoint/layout/naming.h"
#include "core/build_config.h"
#include "engine_test_util.h"
#include "rtft/testing.h"
#include "test_util.h"

#if RTFT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace rtft {
namespace {

#if RTFT_WITH_CUDA
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&ptr, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
};

TEST(GpuCapture, DeviceTensorsRoundTrip) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  // A large tensor (several chunks), many small ones (coalesced), and a bf16 one.
  std::vector<float> big = Iota(3 << 20, 3);
  std::vector<std::vector<float>> small;
  for (int i = 0; i < 200; ++i) small.push_back(Iota(257 + i, static_cast<float>(i)));
  DeviceBuffer d_big(big.size() * 4);
  ASSERT_EQ(cudaMemcpy(d_big.ptr, big.data(), d_big.bytes, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<std::unique_ptr<DeviceBuffer>> d_small;
  CompositeProvider provider(64 << 10, 1 << 20);
  TensorDesc t;
  t.name = "big";
  t.shape = {static_cast<int64_t>(big.size())};
  t.data = d_big.ptr;
  t.memory = MemoryKind::kDevice;
  provider.AddTensor(t);
  for (size_t i = 0; i < small.size(); ++i) {
    d_small.push_back(std::make_unique<DeviceBuffer>(small[i].size() * 4));
    ASSERT_EQ(
        cudaMemcpy(d_small[i]->ptr, small[i].data(), d_small[i]->bytes, cudaMemcpyHostToDevice),
        cudaSuccess);
    TensorDesc s = t;
    s.name = "small/" + std::to_string(i);
    s.shape = {static_cast<int64_t>(small[i].size())};
    s.data = d_small[i]->ptr;
    provider.AddTensor(s);
  }

  CheckpointOptions o;
  o.dir = dir.path();
  o.pool_bytes = 8 << 20;  // smaller than the state: back-pressure on the copy stream
  o.chunk_bytes = 1 << 20;
  auto engine = CheckpointEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->Checkpoint(1, provider).ok());
  ASSERT_TRUE((*engine)->WaitCaptured(1).ok());
  // Overwrite the device copy: the file must hold the captured values.
  ASSERT_EQ(cudaMemset(d_big.ptr, 0, d_big.bytes), cudaSuccess);
  ASSERT_TRUE((*engine)->WaitPersisted(1).ok());
  const std::string file = RankFilePath(dir.path(), 1, 0);
  std::vector<char> stored = StoredBytes(file, "big");
  ASSERT_EQ(stored.size(), big.size() * 4);
  EXPECT_EQ(std::memcmp(stored.data(), big.data(), stored.size()), 0);
  for (size_t i = 0; i < small.size(); i += 37) {
    std::vector<char> s = StoredBytes(file, "small/" + std::to_string(i));
    ASSERT_EQ(s.size(), small[i].size() * 4);
    EXPECT_EQ(std::memcmp(s.data(), small[i].data(), s.size()), 0) << i;
  }

  // A host pointer described as device memory is refused at the call, naming the tensor.
  TensorDesc wrong = t;
  wrong.name = "host_as_device";
  wrong.data = big.data();
  Status refused = (*engine)->Checkpoint(2, TensorProvider(wrong));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("host_as_device"), std::string::npos) << refused;

  // Restore into device memory and read it back.
  ASSERT_TRUE(Restore(dir.path(), RestoreOptions{}, provider).ok());
  std::vector<float> back(big.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d_big.ptr, d_big.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), big.data(), d_big.bytes), 0);
}

// A device tensor marked changed_in_compute (a BatchNorm buffer on the GPU) is copied inside
// Checkpoint(): with the capture thread held until both device tensors were overwritten, the
// file holds the marked one as at the call and the other as after.
TEST(GpuCapture, DeviceTensorsChangedInComputeAreCopiedInsideTheCall) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  std::vector<float> stats = Iota(1 << 18, 2), plain = Iota(1 << 18, 5);
  DeviceBuffer d_stats(stats.size() * 4), d_plain(plain.size() * 4);
  ASSERT_EQ(cudaMemcpy(d_stats.ptr, stats.data(), d_stats.bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_plain.ptr, plain.data(), d_plain.bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  CompositeProvider provider(64 << 10, 1 << 20);
  TensorDesc t;
  t.name = "bn/running_var";
  t.shape = {static_cast<int64_t>(stats.size())};
  t.data = d_stats.ptr;
  t.memory = MemoryKind::kDevice;
  t.changed_in_compute = true;
  provider.AddTensor(t);
  t.name = "plain";
  t.data = d_plain.ptr;
  t.changed_in_compute = false;
  provider.AddTensor(t);
  CheckpointOptions o;
  o.dir = dir.path();
  o.pool_bytes = 8 << 20;
  o.chunk_bytes = 1 << 20;
  auto engine = CheckpointEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string go = dir.path() + "/go";
  ArmFaults(("ckpt.capture_begin:wait=" + go).c_str());
  ASSERT_TRUE((*engine)->Checkpoint(1, provider).ok());
  ASSERT_EQ(cudaMemset(d_stats.ptr, 0, d_stats.bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_plain.ptr, 0, d_plain.bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::ofstream(go).close();
  Status captured = (*engine)->WaitPersisted(1);
  ArmFaults("");
  ASSERT_TRUE(captured.ok()) << captured;
  const std::string file = RankFilePath(dir.path(), 1, 0);
  std::vector<char> kept = StoredBytes(file, "bn/running_var");
  ASSERT_EQ(kept.size(), stats.size() * 4);
  EXPECT_EQ(std::memcmp(kept.data(), stats.data(), kept.size()), 0);
  std::vector<char> late = StoredBytes(file, "plain");
  ASSERT_EQ(late.size(), plain.size() * 4);
  EXPECT_EQ(late, std::vector<char>(late.size(), 0));
}
#else
TEST(GpuCapture, DeviceTensorsRoundTrip) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace rtft
