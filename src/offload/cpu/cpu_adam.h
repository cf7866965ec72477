// CPU AdamW kernels for the offloaded optimizer: scalar, AVX2 and AVX-512, picked at run time by
// what the CPU supports. All three compute bit-identical results (see adamw_scalar.h), so the
// choice changes speed only. Used by the offload optimizer's CPU workers and by the benchmark.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rtft/offload.h"
#include "rtft/state.h"

namespace rtft::offload {

// One step's constants, computed in double once per step and rounded to fp32.
struct AdamWStep {
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float decay = 1;           // 1 - lr * weight_decay
  float neg_step_size = 0;   // -lr / (1 - beta1^t)
  float inv_bias2_sqrt = 0;  // 1 / sqrt(1 - beta2^t)
  float eps = 0;
};
// `step` counts from 1, as torch's state["step"] after the increment.
AdamWStep MakeAdamWStep(const AdamWConfig& config, int64_t step);

// n elements of fp32 master/m/v updated in place with gradients of grad_dtype; the updated
// master is also written, rounded, to `low` (low_dtype) unless it is null.
struct AdamWSpan {
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::kFloat32;
  void* low = nullptr;
  DType low_dtype = DType::kFloat32;
  size_t n = 0;
};

enum class CpuIsa { kScalar, kAvx2, kAvx512 };
using AdamWKernelFn = void (*)(const AdamWStep&, const AdamWSpan&);

bool CpuIsaSupported(CpuIsa isa);
CpuIsa BestCpuIsa();
const char* CpuIsaName(CpuIsa isa);
// "auto" picks BestCpuIsa(); "avx512", "avx2", "scalar" must be supported by this CPU.
bool ParseCpuIsa(const std::string& text, CpuIsa* isa);
AdamWKernelFn GetAdamWKernel(CpuIsa isa);

void AdamWScalar(const AdamWStep& s, const AdamWSpan& a);
void AdamWAvx2(const AdamWStep& s, const AdamWSpan& a);
void AdamWAvx512(const AdamWStep& s, const AdamWSpan& a);

// Host conversions (master initialization, restore): exact widening, round-to-nearest-even
// narrowing, the same roundings as the kernels.
void ConvertToFloat(const void* src, DType dtype, float* dst, size_t n);
void ConvertFromFloat(const float* src, void* dst, DType dtype, size_t n);

}  // namespace rtft::offload
