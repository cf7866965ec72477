#include "offload/cpu/cpu_adam.h"

#include <cmath>

#include "offload/cpu/adamw_scalar.h"

namespace rtft::offload {

AdamWStep MakeAdamWStep(const AdamWConfig& c, int64_t step) {
  const double t = static_cast<double>(step);
  AdamWStep s;
  s.beta1 = static_cast<float>(c.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  s.beta2 = static_cast<float>(c.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  s.decay = static_cast<float>(1.0 - c.lr * c.weight_decay);
  s.neg_step_size = static_cast<float>(-c.lr / (1.0 - std::pow(c.beta1, t)));
  s.inv_bias2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(c.beta2, t)));
  s.eps = static_cast<float>(c.eps);
  return s;
}

void AdamWScalar(const AdamWStep& s, const AdamWSpan& a) { AdamWScalarRange(s, a, 0); }

bool CpuIsaSupported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && CpuIsaSupported(CpuIsa::kAvx2);
  }
  return false;
}

CpuIsa BestCpuIsa() {
  if (CpuIsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (CpuIsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kScalar:
      return "scalar";
  }
  return "unknown";
}

bool ParseCpuIsa(const std::string& text, CpuIsa* isa) {
  if (text == "auto" || text.empty()) {
    *isa = BestCpuIsa();
    return true;
  }
  for (CpuIsa candidate : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (text == CpuIsaName(candidate) && CpuIsaSupported(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

AdamWKernelFn GetAdamWKernel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return &AdamWAvx512;
    case CpuIsa::kAvx2:
      return &AdamWAvx2;
    case CpuIsa::kScalar:
      return &AdamWScalar;
  }
  return &AdamWScalar;
}

void ConvertToFloat(const void* src, DType dtype, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = LoadAsFloat(src, dtype, i);
}

void ConvertFromFloat(const float* src, void* dst, DType dtype, size_t n) {
  for (size_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
}

}  // namespace rtft::offload
