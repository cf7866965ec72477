// The AdamW element update in scalar C++, with fp16/bf16 loads and stores. The scalar
// kernel is built from these, the vector kernels use them for their tails, and the vector bodies
// perform the same operations in the same order (every multiply-add an explicit fused one, sqrt
// and divide correctly rounded), so all kernels give bitwise identical results.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "offload/cpu/cpu_adam.h"

namespace rtft::offload {

// The conversions live in core/half.h, shared with the communicators' reductions.
using ::rtft::Bf16ToFloat;
using ::rtft::BitsFloat;
using ::rtft::FloatBits;
using ::rtft::FloatToBf16;
using ::rtft::FloatToHalf;
using ::rtft::HalfToFloat;

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
