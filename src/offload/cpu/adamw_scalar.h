// The AdamW element update and the fp16/bf16 conversions, written once in scalar C++. The scalar
// kernel is built from these, the vector kernels use them for their tails, and the vector bodies
// perform the same operations in the same order (every multiply-add an explicit fused one, sqrt
// and divide correctly rounded), so all kernels give bitwise identical results.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "offload/cpu/cpu_adam.h"

namespace rtft::offload {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays a (quiet) NaN with its sign.
inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Exact, as F16C's vcvtph2ps (a signalling NaN comes back quiet).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in fp32.
    return BitsFloat(sign | FloatBits(static_cast<float>(mant) * 5.9604644775390625e-8f));
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even with overflow to infinity and gradual underflow, as F16C's vcvtps2ph
// with _MM_FROUND_TO_NEAREST_INT.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (ax >= 0x38800000u) {                                              // normal half
    const uint32_t r = ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // Subnormal or zero: adding 0.5 lines the half's mantissa up with the float's low bits and
  // lets the FPU round to nearest even.
  const float shifted = BitsFloat(ax) + 0.5f;
  return static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3f000000u));
}

inline float LoadAsFloat(const void* p, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16:
      return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

inline void StoreFromFloat(void* p, DType dtype, size_t i, float f) {
  switch (dtype) {
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(f);
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBf16(f);
      break;
    default:
      static_cast<float*>(p)[i] = f;
  }
}

// torch.optim.AdamW for one element: p *= 1 - lr*wd; m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g*g; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
inline void AdamWElement(const AdamWStep& s, float g, float* p, float* m, float* v) {
  const float mm = std::fma(s.beta1, *m, s.one_minus_beta1 * g);
  const float vv = std::fma(s.beta2, *v, (s.one_minus_beta2 * g) * g);
  const float denom = std::fma(std::sqrt(vv), s.inv_bias2_sqrt, s.eps);
  *p = std::fma(s.neg_step_size, mm / denom, *p * s.decay);
  *m = mm;
  *v = vv;
}

// Elements [begin, a.n) of a span; the scalar kernel and the vector kernels' tails.
inline void AdamWScalarRange(const AdamWStep& s, const AdamWSpan& a, size_t begin) {
  for (size_t i = begin; i < a.n; ++i) {
    AdamWElement(s, LoadAsFloat(a.grad, a.grad_dtype, i), &a.master[i], &a.m[i], &a.v[i]);
    if (a.low != nullptr) StoreFromFloat(a.low, a.low_dtype, i, a.master[i]);
  }
}

}  // namespace rtft::offload
