// The CPU AdamW kernels: scalar, AVX2 and AVX-512 give bit-identical master, momentum, variance
// and rounded parameters for every gradient/parameter dtype pair and odd lengths (vector tails);
// the scalar fp16/bf16 conversions agree with the hardware's (F16C) and with round-to-nearest-even.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "offload/cpu/adamw_scalar.h"
#include "offload/cpu/cpu_adam.h"

namespace rtft::offload {
namespace {

__attribute__((target("f16c"))) uint16_t HardwareHalf(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float HardwareHalfToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(h))));
}

TEST(Conversions, HalfMatchesF16cOnSampledFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  // Every 997th bit pattern: all exponents, subnormals, overflow, NaNs, infinities.
  uint64_t mismatches = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 997) {
    const float f = BitsFloat(static_cast<uint32_t>(u));
    if (FloatToHalf(f) != HardwareHalf(f)) ++mismatches;
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  std::numeric_limits<float>::infinity(), 6.1035156e-05f, 6.1e-05f})
    EXPECT_EQ(FloatToHalf(f), HardwareHalf(f)) << f;
  EXPECT_EQ(mismatches, 0u);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = HalfToFloat(static_cast<uint16_t>(h));
    const float b = HardwareHalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      EXPECT_EQ(FloatBits(a), FloatBits(b)) << h;
    }
  }
}

TEST(Conversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(BitsFloat(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(BitsFloat(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(BitsFloat(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBf16(BitsFloat(0x7f7fffff)), 0x7f80);  // overflows to infinity
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = FloatToBf16(BitsFloat(0x7f800001));  // signalling NaN stays a NaN
  EXPECT_TRUE(std::isnan(Bf16ToFloat(nan)));
  // Against double arithmetic: the nearest bf16, ties to even.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    const uint16_t b = FloatToBf16(f);
    const double lo = Bf16ToFloat(b), err = std::abs(static_cast<double>(f) - lo);
    const double down = Bf16ToFloat(static_cast<uint16_t>(b - 1));
    const double up = Bf16ToFloat(static_cast<uint16_t>(b + 1));
    ASSERT_LE(err, std::abs(static_cast<double>(f) - down)) << f;
    ASSERT_LE(err, std::abs(static_cast<double>(f) - up)) << f;
  }
}

struct Arrays {
  std::vector<float> master, m, v;
  std::vector<char> grad, low;
};

Arrays MakeArrays(size_t n, DType grad_dtype, DType low_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Arrays a;
  a.master.resize(n);
  a.m.resize(n);
  a.v.resize(n);
  a.grad.resize(n * DTypeSize(grad_dtype));
  a.low.resize(n * DTypeSize(low_dtype));
  for (size_t i = 0; i < n; ++i) {
    a.master[i] = normal(rng);
    a.m[i] = 0.1f * normal(rng);
    a.v[i] = std::abs(0.01f * normal(rng));
    float g = normal(rng) * (i % 7 == 0 ? 1e-4f : 1.0f);
    if (i % 101 == 5) g = 0.0f;
    if (i % 211 == 3) g = 3e4f;  // large gradients: overflow candidates in fp16
    StoreFromFloat(a.grad.data(), grad_dtype, i, g);
  }
  return a;
}

void RunKernel(CpuIsa isa, const AdamWStep& s, Arrays* a, DType grad_dtype, DType low_dtype) {
  AdamWSpan span;
  span.master = a->master.data();
  span.m = a->m.data();
  span.v = a->v.data();
  span.grad = a->grad.data();
  span.grad_dtype = grad_dtype;
  span.low = a->low.data();
  span.low_dtype = low_dtype;
  span.n = a->master.size();
  GetAdamWKernel(isa)(s, span);
}

TEST(CpuAdamW, KernelsAgreeBitwise) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (CpuIsaSupported(isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  AdamWConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  for (DType gd : dtypes) {
    for (DType ld : dtypes) {
      for (size_t n : {1u, 7u, 15u, 16u, 17u, 33u, 1000u, 4099u}) {
        Arrays ref = MakeArrays(n, gd, ld, static_cast<uint32_t>(n));
        for (CpuIsa isa : isas) {
          Arrays a = MakeArrays(n, gd, ld, static_cast<uint32_t>(n));
          Arrays r = ref;
          for (int step = 1; step <= 3; ++step) {
            RunKernel(CpuIsa::kScalar, MakeAdamWStep(c, step), &r, gd, ld);
            RunKernel(isa, MakeAdamWStep(c, step), &a, gd, ld);
          }
          const std::string what = std::string(CpuIsaName(isa)) + " grad " + DTypeName(gd) +
                                   " low " + DTypeName(ld) + " n " + std::to_string(n);
          EXPECT_EQ(0, std::memcmp(a.master.data(), r.master.data(), n * 4)) << what;
          EXPECT_EQ(0, std::memcmp(a.m.data(), r.m.data(), n * 4)) << what;
          EXPECT_EQ(0, std::memcmp(a.v.data(), r.v.data(), n * 4)) << what;
          EXPECT_EQ(0, std::memcmp(a.low.data(), r.low.data(), a.low.size())) << what;
        }
      }
    }
  }
}

TEST(CpuAdamW, NullLowLeavesNothingElse) {
  AdamWConfig c;
  Arrays a = MakeArrays(100, DType::kFloat32, DType::kFloat32, 1);
  Arrays b = a;
  AdamWSpan span{a.master.data(), a.m.data(), a.v.data(),      a.grad.data(),
                 DType::kFloat32, nullptr,    DType::kFloat32, 100};
  GetAdamWKernel(BestCpuIsa())(MakeAdamWStep(c, 1), span);
  RunKernel(CpuIsa::kScalar, MakeAdamWStep(c, 1), &b, DType::kFloat32, DType::kFloat32);
  EXPECT_EQ(0, std::memcmp(a.master.data(), b.master.data(), 400));
}

TEST(CpuAdamW, ParseIsa) {
  CpuIsa isa;
  EXPECT_TRUE(ParseCpuIsa("auto", &isa));
  EXPECT_EQ(isa, BestCpuIsa());
  EXPECT_TRUE(ParseCpuIsa("scalar", &isa));
  EXPECT_EQ(isa, CpuIsa::kScalar);
  EXPECT_FALSE(ParseCpuIsa("sse9", &isa));
}

}  // namespace
}  // namespace rtft::offload
