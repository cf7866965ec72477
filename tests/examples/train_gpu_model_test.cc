// rtft-train's model on the GPU (examples/train/gpu_model.h) against its host definition
// (model.h): the initial parameters, drawn on the device, are InitParams' values rounded to bf16,
// bit for bit. Skips without a GPU.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/capture/device_copy.h"
#include "gpu_model.h"
#include "model.h"

namespace train {
namespace {

// fp32 to bf16, rounding to nearest even (every value here is finite).
uint16_t Bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TEST(TrainGpuModel, InitialParametersAreInitParamsRoundedToBf16) {
  if (!rtft::CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  ModelShape shape;
  shape.hidden = 96;
  for (uint64_t seed : {1ull, 42ull, 0xfeedfacecafebeefull}) {
    auto g = GpuModel::Create(shape, seed, 0, 8);
    ASSERT_TRUE(g.ok()) << g.status();
    const size_t n = shape.params();
    ASSERT_EQ((*g)->params(), n);
    std::vector<uint16_t> device(n);
    ASSERT_TRUE((*g)->Copy(device.data(), (*g)->params_data(), n * 2).ok());
    std::vector<float> host(n);
    InitParams(shape, seed, host.data());
    size_t differ = 0, first = n;
    for (size_t i = 0; i < n; ++i)
      if (device[i] != Bf16(host[i]) && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "seed " << seed << ": first at parameter " << first;
  }
}

}  // namespace
}  // namespace train
