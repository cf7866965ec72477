// Helpers for the offload tests: a double-precision AdamW written straight from
// torch.optim.AdamW's documented formula (the reference every path is held to), deterministic
// gradients, and low-precision buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "offload/cpu/adamw_scalar.h"
#include "rtft/offload.h"

namespace rtft::offload {

struct ReferenceAdamW {
  std::vector<double> p, m, v;
  int64_t t = 0;

  explicit ReferenceAdamW(std::vector<double> init)
      : p(std::move(init)), m(p.size(), 0.0), v(p.size(), 0.0) {}

  void Step(const AdamWConfig& c, const std::vector<double>& g) {
    ++t;
    const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - c.lr * c.weight_decay;
      m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + c.eps;
      p[i] -= c.lr / bc1 * m[i] / denom;
    }
  }
};

// n values of `dtype` (as raw bytes) drawn from N(0, scale); `as_double` gets their exact values.
inline std::vector<char> RandomValues(size_t n, DType dtype, float scale, std::mt19937* rng,
                                      std::vector<double>* as_double) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<char> bytes(n * DTypeSize(dtype));
  as_double->resize(n);
  for (size_t i = 0; i < n; ++i) {
    StoreFromFloat(bytes.data(), dtype, i, normal(*rng));
    (*as_double)[i] = LoadAsFloat(bytes.data(), dtype, i);
  }
  return bytes;
}

// One unit in the last place of `dtype` at magnitude |x|, subnormals included.
inline double Ulp(DType dtype, double x) {
  const int mantissa = dtype == DType::kFloat32 ? 23 : dtype == DType::kFloat16 ? 10 : 7;
  const int min_exp = dtype == DType::kFloat16 ? -14 : -126;
  int exp = 0;
  std::frexp(x == 0 ? 1e-30 : x, &exp);
  return std::ldexp(1.0, std::max(exp - 1, min_exp) - mantissa);
}

}  // namespace rtft::offload
