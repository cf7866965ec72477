// AVX-512 AdamW: 16 elements per iteration, the same operations as AdamWElement. Compiled with a
// target attribute (not a per-file -mavx512f) so that no inline function of a shared header is
// emitted with AVX-512 instructions and then picked by the linker for other callers.
// GCC 12 reports the AVX-512 headers' own _mm512_undefined_* placeholders as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "offload/cpu/adamw_scalar.h"
#include "offload/cpu/cpu_adam.h"

#define RTFT_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace rtft::offload {
namespace {

struct F32 {};
struct F16 {};
struct BF16 {};

RTFT_AVX512 inline __m512 Load(F32, const void* p, size_t i) {
  return _mm512_loadu_ps(static_cast<const float*>(p) + i);
}
RTFT_AVX512 inline __m512 Load(F16, const void* p, size_t i) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
}
RTFT_AVX512 inline __m512 Load(BF16, const void* p, size_t i) {
  const __m256i h =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

RTFT_AVX512 inline void Store(F32, void* p, size_t i, __m512 x) {
  _mm512_storeu_ps(static_cast<float*>(p) + i, x);
}
RTFT_AVX512 inline void Store(F16, void* p, size_t i, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i),
                      _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// Round to nearest even as FloatToBf16, NaNs made quiet.
RTFT_AVX512 inline void Store(BF16, void* p, size_t i, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i),
                      _mm512_cvtepi32_epi16(r));
}
struct NoLow {};
RTFT_AVX512 inline void Store(NoLow, void*, size_t, __m512) {}

template <typename G, typename L>
RTFT_AVX512 void Body(const AdamWStep& s, const AdamWSpan& a) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), omb1 = _mm512_set1_ps(s.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), omb2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 decay = _mm512_set1_ps(s.decay), nstep = _mm512_set1_ps(s.neg_step_size);
  const __m512 ibc2 = _mm512_set1_ps(s.inv_bias2_sqrt), eps = _mm512_set1_ps(s.eps);
  size_t i = 0;
  for (; i + 16 <= a.n; i += 16) {
    const __m512 g = Load(G{}, a.grad, i);
    __m512 m = _mm512_loadu_ps(a.m + i);
    __m512 v = _mm512_loadu_ps(a.v + i);
    __m512 p = _mm512_loadu_ps(a.master + i);
    m = _mm512_fmadd_ps(b1, m, _mm512_mul_ps(omb1, g));
    v = _mm512_fmadd_ps(b2, v, _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), ibc2, eps);
    p = _mm512_fmadd_ps(nstep, _mm512_div_ps(m, denom), _mm512_mul_ps(p, decay));
    _mm512_storeu_ps(a.m + i, m);
    _mm512_storeu_ps(a.v + i, v);
    _mm512_storeu_ps(a.master + i, p);
    Store(L{}, a.low, i, p);
  }
  AdamWScalarRange(s, a, i);
}

template <typename G>
RTFT_AVX512 void ForLow(const AdamWStep& s, const AdamWSpan& a) {
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

void AdamWAvx512(const AdamWStep& s, const AdamWSpan& a) {
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
