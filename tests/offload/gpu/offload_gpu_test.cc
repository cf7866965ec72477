// The offloaded optimizer with parameters in GPU memory: the CPU-only path (gradients down,
// parameters up), the resident GPU path, the interleaved path (model's share, static shares, one
// to three buffers, a budget too small for any) all end equal to the host-only CPU path, for fp32,
// fp16 and bf16 parameters, with the device parameters equal to the rounded master weights.
// Skips where there is no CUDA build or no device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "checkpoint/capture/device_copy.h"
#include "core/build_config.h"
#include "offload/cpu/adamw_scalar.h"
#include "offload_test_util.h"
#include "rtft/offload.h"

#if RTFT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace rtft::offload {
namespace {

#if RTFT_WITH_CUDA

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&ptr, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
};

struct Case {
  DType dtype;
  DType grad_dtype;
  std::vector<uint64_t> sizes;
  uint64_t subgroup;
  int steps;
};

// The host path's result for the same initial values and gradients.
struct Run {
  std::vector<std::vector<float>> master;
  std::vector<std::vector<char>> params;
};

std::vector<std::vector<std::vector<char>>> MakeGrads(const Case& c, std::mt19937* rng) {
  std::vector<std::vector<std::vector<char>>> grads(c.steps);
  std::vector<double> unused;
  for (auto& step : grads)
    for (uint64_t n : c.sizes) step.push_back(RandomValues(n, c.grad_dtype, 0.5f, rng, &unused));
  return grads;
}

Run RunHost(const Case& c, const std::vector<std::vector<char>>& init,
            const std::vector<std::vector<std::vector<char>>>& grads) {
  Run r;
  r.params = init;
  std::vector<OffloadParam> params;
  for (size_t i = 0; i < c.sizes.size(); ++i)
    params.push_back({"p" + std::to_string(i),
                      c.dtype,
                      c.grad_dtype,
                      r.params[i].data(),
                      c.sizes[i],
                      {},
                      MemoryKind::kHost,
                      0});
  OffloadOptions o;
  o.mode = OffloadMode::kCpu;
  o.subgroup_elements = c.subgroup;
  o.cpu_threads = 2;
  auto opt = OffloadOptimizer::Create(params, o);
  EXPECT_TRUE(opt.ok()) << opt.status();
  for (const auto& step : grads) {
    std::vector<const void*> ptrs;
    for (const auto& g : step) ptrs.push_back(g.data());
    EXPECT_TRUE((*opt)->Step(ptrs).ok());
  }
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    r.master.emplace_back(c.sizes[i]);
    EXPECT_TRUE((*opt)->ReadMaster(i, r.master.back().data()).ok());
  }
  return r;
}

Run RunDevice(const Case& c, const std::vector<std::vector<char>>& init,
              const std::vector<std::vector<std::vector<char>>>& grads, OffloadOptions o,
              OffloadStepStats* last) {
  std::vector<std::unique_ptr<DeviceBuffer>> d_params, d_grads;
  std::vector<OffloadParam> params;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    d_params.push_back(std::make_unique<DeviceBuffer>(init[i].size()));
    d_grads.push_back(std::make_unique<DeviceBuffer>(c.sizes[i] * DTypeSize(c.grad_dtype)));
    EXPECT_EQ(cudaMemcpy(d_params[i]->ptr, init[i].data(), init[i].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    params.push_back({"p" + std::to_string(i),
                      c.dtype,
                      c.grad_dtype,
                      d_params[i]->ptr,
                      c.sizes[i],
                      {},
                      MemoryKind::kDevice,
                      0});
  }
  o.subgroup_elements = c.subgroup;
  o.cpu_threads = 2;
  auto opt = OffloadOptimizer::Create(params, o);
  EXPECT_TRUE(opt.ok()) << opt.status();
  Run r;
  if (!opt.ok()) return r;
  for (const auto& step : grads) {
    std::vector<const void*> ptrs;
    for (size_t i = 0; i < step.size(); ++i) {
      EXPECT_EQ(cudaMemcpy(d_grads[i]->ptr, step[i].data(), step[i].size(), cudaMemcpyHostToDevice),
                cudaSuccess);
      ptrs.push_back(d_grads[i]->ptr);
    }
    Status s = (*opt)->Step(ptrs);
    EXPECT_TRUE(s.ok()) << s;
  }
  *last = (*opt)->last_step();
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    r.master.emplace_back(c.sizes[i]);
    EXPECT_TRUE((*opt)->ReadMaster(i, r.master.back().data()).ok());
    r.params.emplace_back(init[i].size());
    EXPECT_EQ(cudaMemcpy(r.params.back().data(), d_params[i]->ptr, init[i].size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return r;
}

// The GPU and CPU kernels perform the same correctly rounded operations, so bitwise equality is
// expected; the assertion allows 1e-6 absolute (a few ulps at |w| ~ 1) and reports mismatches.
void ExpectClose(const Case& c, const Run& want, const Run& got, const std::string& what) {
  ASSERT_EQ(got.master.size(), want.master.size()) << what;
  uint64_t differ = 0;
  double worst = 0;
  for (size_t i = 0; i < want.master.size(); ++i) {
    for (size_t k = 0; k < want.master[i].size(); ++k) {
      const double d = std::abs(static_cast<double>(got.master[i][k]) - want.master[i][k]);
      worst = std::max(worst, d);
      if (FloatBits(got.master[i][k]) != FloatBits(want.master[i][k])) ++differ;
      // The device parameter is the master rounded to its dtype.
      const float low = LoadAsFloat(got.params[i].data(), c.dtype, k);
      float rounded = got.master[i][k];
      if (c.dtype == DType::kFloat16) rounded = HalfToFloat(FloatToHalf(rounded));
      if (c.dtype == DType::kBFloat16) rounded = Bf16ToFloat(FloatToBf16(rounded));
      ASSERT_EQ(FloatBits(low), FloatBits(rounded)) << what << " p" << i << "[" << k << "]";
    }
  }
  std::printf("%-40s worst |diff| %.3g, %llu elements not bitwise equal\n", what.c_str(), worst,
              static_cast<unsigned long long>(differ));
  EXPECT_LE(worst, 1e-6) << what;
}

void CheckAllModes(const Case& c) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  std::vector<std::vector<char>> init;
  for (uint64_t n : c.sizes) {
    std::vector<double> unused;
    init.push_back(RandomValues(n, c.dtype, 1.0f, &rng, &unused));
  }
  const auto grads = MakeGrads(c, &rng);
  const Run host = RunHost(c, init, grads);
  const uint64_t slot = c.subgroup * 12, staging = c.subgroup * 8;
  struct Variant {
    const char* name;
    OffloadMode mode;
    double fraction;
    uint64_t budget;
  } variants[] = {
      {"cpu (device params)", OffloadMode::kCpu, -1, 1ull << 30},
      {"gpu resident", OffloadMode::kGpu, -1, 1ull << 30},
      {"interleaved, model", OffloadMode::kInterleaved, -1, 1ull << 30},
      {"interleaved, static 0.5", OffloadMode::kInterleaved, 0.5, 1ull << 30},
      {"interleaved, static 1.0", OffloadMode::kInterleaved, 1.0, 1ull << 30},
      {"interleaved, static 1.0, 1 slot", OffloadMode::kInterleaved, 1.0, slot + staging},
      {"interleaved, static 0.7, 2 slots", OffloadMode::kInterleaved, 0.7, 2 * slot + staging},
      {"interleaved, budget too small", OffloadMode::kInterleaved, -1, 1024},
  };
  for (const Variant& v : variants) {
    OffloadOptions o;
    o.mode = v.mode;
    o.static_gpu_fraction = v.fraction;
    o.gpu_budget_bytes = v.budget;
    OffloadStepStats last;
    const std::string what = std::string(DTypeName(c.dtype)) + " " + v.name;
    const Run got = RunDevice(c, init, grads, o, &last);
    ExpectClose(c, host, got, what);
    if (v.fraction == 1.0 || v.mode == OffloadMode::kGpu) {
      EXPECT_EQ(last.cpu_subgroups, 0u) << what;
    }
    if (v.mode == OffloadMode::kCpu || v.budget == 1024) {
      EXPECT_EQ(last.gpu_subgroups, 0u) << what;
    }
    if (v.fraction == 0.5) {
      EXPECT_GT(last.gpu_subgroups, 0u) << what;
      EXPECT_GT(last.cpu_subgroups, 0u) << what;
    }
  }
}

TEST(OffloadGpu, Fp32AllModesEqualCpu) {
  CheckAllModes({DType::kFloat32, DType::kFloat32, {1500, 7, 1, 2333, 64}, 1000, 20});
}
TEST(OffloadGpu, Fp16AllModesEqualCpu) {
  CheckAllModes({DType::kFloat16, DType::kFloat16, {1500, 7, 1, 2333, 64}, 1000, 20});
}
TEST(OffloadGpu, Bf16AllModesEqualCpu) {
  CheckAllModes({DType::kBFloat16, DType::kBFloat16, {1500, 7, 1, 2333, 64}, 1000, 20});
}
// Many subgroups, so every buffer is reused several times within a step.
TEST(OffloadGpu, Bf16ManySubgroupsEqualCpu) {
  CheckAllModes({DType::kBFloat16, DType::kFloat32, {1 << 20, 777777, 3 << 19}, 1 << 17, 8});
}

TEST(OffloadGpu, ResidentStateIsDescribedInDeviceMemory) {
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer p(4096 * 2);
  ASSERT_EQ(cudaMemset(p.ptr, 0, 4096 * 2), cudaSuccess);
  OffloadOptions o;
  o.mode = OffloadMode::kGpu;
  auto opt = OffloadOptimizer::Create(
      {{"w", DType::kBFloat16, DType::kBFloat16, p.ptr, 4096, {}, MemoryKind::kDevice, 0}}, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  StateDescription d;
  ASSERT_TRUE((*opt)->state_provider()->Describe(&d).ok());
  ASSERT_EQ(d.tensors.size(), 3u);
  for (const TensorDesc& t : d.tensors) EXPECT_EQ(t.memory, MemoryKind::kDevice) << t.name;
}

#else
TEST(OffloadGpu, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace rtft::offload
