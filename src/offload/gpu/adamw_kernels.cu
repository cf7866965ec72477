// nvcc warns that [[nodiscard]] on the StatusOr class template (status.h) is ignored; the host
// compiler enforces it everywhere else.
#pragma nv_diag_suppress 2810

#include "offload/gpu/adamw_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace rtft::offload {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct Conv;
template <>
struct Conv<float> {
  __device__ static float In(float x) { return x; }
  __device__ static float Out(float x) { return x; }
};
template <>
struct Conv<__half> {
  __device__ static float In(__half x) { return __half2float(x); }
  __device__ static __half Out(float x) { return __float2half_rn(x); }
};
template <>
struct Conv<__nv_bfloat16> {
  __device__ static float In(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 Out(float x) { return __float2bfloat16_rn(x); }
};

// The intrinsics fix the rounding of every operation, so no contraction by the compiler can
// change the result: the same sequence as AdamWElement on the CPU.
template <typename G, typename L, bool kLow>
__global__ void AdamWKernel(AdamWStep s, float* __restrict__ master, float* __restrict__ m,
                            float* __restrict__ v, const G* __restrict__ grad, L* __restrict__ low,
                            size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = Conv<G>::In(grad[i]);
    const float mm = __fmaf_rn(s.beta1, m[i], __fmul_rn(s.one_minus_beta1, g));
    const float vv = __fmaf_rn(s.beta2, v[i], __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    const float denom = __fmaf_rn(__fsqrt_rn(vv), s.inv_bias2_sqrt, s.eps);
    const float p = __fmaf_rn(s.neg_step_size, __fdiv_rn(mm, denom), __fmul_rn(master[i], s.decay));
    m[i] = mm;
    v[i] = vv;
    master[i] = p;
    if (kLow) low[i] = Conv<L>::Out(p);
  }
}

template <typename In, typename Out>
__global__ void ConvertKernel(const In* __restrict__ src, Out* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = Conv<Out>::Out(Conv<In>::In(src[i]));
}

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b == 0 ? 1 : b) : 65535 * 8);
}

template <typename G, typename L, bool kLow>
cudaError_t Launch(const AdamWStep& s, const AdamWSpan& a, cudaStream_t stream) {
  AdamWKernel<G, L, kLow><<<Blocks(a.n), kThreads, 0, stream>>>(
      s, a.master, a.m, a.v, static_cast<const G*>(a.grad), static_cast<L*>(a.low), a.n);
  return cudaGetLastError();
}

template <typename G>
cudaError_t LaunchForLow(const AdamWStep& s, const AdamWSpan& a, cudaStream_t stream) {
  if (a.low == nullptr) return Launch<G, float, false>(s, a, stream);
  switch (a.low_dtype) {
    case DType::kFloat16:
      return Launch<G, __half, true>(s, a, stream);
    case DType::kBFloat16:
      return Launch<G, __nv_bfloat16, true>(s, a, stream);
    default:
      return Launch<G, float, true>(s, a, stream);
  }
}

template <typename In>
cudaError_t ConvertTo(const In* src, void* dst, DType dtype, size_t n, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat16:
      ConvertKernel<In, __half>
          <<<Blocks(n), kThreads, 0, stream>>>(src, static_cast<__half*>(dst), n);
      break;
    case DType::kBFloat16:
      ConvertKernel<In, __nv_bfloat16>
          <<<Blocks(n), kThreads, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), n);
      break;
    default:
      ConvertKernel<In, float>
          <<<Blocks(n), kThreads, 0, stream>>>(src, static_cast<float*>(dst), n);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAdamW(const AdamWStep& s, const AdamWSpan& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  switch (a.grad_dtype) {
    case DType::kFloat16:
      return LaunchForLow<__half>(s, a, stream);
    case DType::kBFloat16:
      return LaunchForLow<__nv_bfloat16>(s, a, stream);
    default:
      return LaunchForLow<float>(s, a, stream);
  }
}

cudaError_t LaunchToFloat(const void* src, DType dtype, float* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat16:
      return ConvertTo(static_cast<const __half*>(src), dst, DType::kFloat32, n, stream);
    case DType::kBFloat16:
      return ConvertTo(static_cast<const __nv_bfloat16*>(src), dst, DType::kFloat32, n, stream);
    default:
      return ConvertTo(static_cast<const float*>(src), dst, DType::kFloat32, n, stream);
  }
}

cudaError_t LaunchFromFloat(const float* src, void* dst, DType dtype, size_t n,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ConvertTo(src, dst, dtype, n, stream);
}

}  // namespace rtft::offload
