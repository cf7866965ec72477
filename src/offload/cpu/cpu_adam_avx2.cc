// AVX2 AdamW (with FMA and F16C): 8 elements per iteration, the same operations as AdamWElement.
// Compiled with a target attribute (not a per-file -mavx2) so that no inline function of a
// shared header is emitted with AVX2 instructions and then picked by the linker for other callers.
#include <immintrin.h>

#include "offload/cpu/adamw_scalar.h"
#include "offload/cpu/cpu_adam.h"

#define RTFT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace rtft::offload {
namespace {

struct F32 {};
struct F16 {};
struct BF16 {};
struct NoLow {};

RTFT_AVX2 inline __m128i Load8x16(const void* p, size_t i) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
}
RTFT_AVX2 inline void Store8x16(void* p, size_t i, __m128i x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), x);
}

RTFT_AVX2 inline __m256 Load(F32, const void* p, size_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
RTFT_AVX2 inline __m256 Load(F16, const void* p, size_t i) {
  return _mm256_cvtph_ps(Load8x16(p, i));
}
RTFT_AVX2 inline __m256 Load(BF16, const void* p, size_t i) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(Load8x16(p, i)), 16));
}

RTFT_AVX2 inline void Store(F32, void* p, size_t i, __m256 x) {
  _mm256_storeu_ps(static_cast<float*>(p) + i, x);
}
RTFT_AVX2 inline void Store(F16, void* p, size_t i, __m256 x) {
  Store8x16(p, i, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Round to nearest even as FloatToBf16, NaNs made quiet.
RTFT_AVX2 inline void Store(BF16, void* p, size_t i, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  // Every lane is below 0x10000, so unsigned saturation packs exactly; the permute gathers the
  // two 128-bit lanes' halves.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  Store8x16(p, i, _mm256_castsi256_si128(packed));
}
RTFT_AVX2 inline void Store(NoLow, void*, size_t, __m256) {}

template <typename G, typename L>
RTFT_AVX2 void Body(const AdamWStep& s, const AdamWSpan& a) {
  const __m256 b1 = _mm256_set1_ps(s.beta1), omb1 = _mm256_set1_ps(s.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(s.beta2), omb2 = _mm256_set1_ps(s.one_minus_beta2);
  const __m256 decay = _mm256_set1_ps(s.decay), nstep = _mm256_set1_ps(s.neg_step_size);
  const __m256 ibc2 = _mm256_set1_ps(s.inv_bias2_sqrt), eps = _mm256_set1_ps(s.eps);
  size_t i = 0;
  for (; i + 8 <= a.n; i += 8) {
    const __m256 g = Load(G{}, a.grad, i);
    __m256 m = _mm256_loadu_ps(a.m + i);
    __m256 v = _mm256_loadu_ps(a.v + i);
    __m256 p = _mm256_loadu_ps(a.master + i);
    m = _mm256_fmadd_ps(b1, m, _mm256_mul_ps(omb1, g));
    v = _mm256_fmadd_ps(b2, v, _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), ibc2, eps);
    p = _mm256_fmadd_ps(nstep, _mm256_div_ps(m, denom), _mm256_mul_ps(p, decay));
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
    _mm256_storeu_ps(a.master + i, p);
    Store(L{}, a.low, i, p);
  }
  AdamWScalarRange(s, a, i);
}

template <typename G>
RTFT_AVX2 void ForLow(const AdamWStep& s, const AdamWSpan& a) {
  if (a.low == nullptr) return Body<G, NoLow>(s, a);
  switch (a.low_dtype) {
    case DType::kFloat16:
      return Body<G, F16>(s, a);
    case DType::kBFloat16:
      return Body<G, BF16>(s, a);
    default:
      return Body<G, F32>(s, a);
  }
}

}  // namespace

void AdamWAvx2(const AdamWStep& s, const AdamWSpan& a) {
  switch (a.grad_dtype) {
    case DType::kFloat16:
      return ForLow<F16>(s, a);
    case DType::kBFloat16:
      return ForLow<BF16>(s, a);
    default:
      return ForLow<F32>(s, a);
  }
}

}  // namespace rtft::offload
