// IEEE fp16 and bfloat16 <-> fp32 conversions, written once in scalar C++: round to nearest even,
// NaN kept quiet with its sign, as the x86 F16C instructions and CUDA's intrinsics do. Used by the
// offloaded AdamW (whose vector kernels must match these bit for bit) and by the communicators'
// reductions over 16-bit floats.
#pragma once

#include <cstdint>
#include <cstring>

namespace rtft {

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

}  // namespace rtft
