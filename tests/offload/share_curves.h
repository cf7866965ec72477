// Synthetic update-time curves over the GPU share for the share search and controller tests: the
// curve measured on the GPU machine (1 B bf16 parameters, 16 threads, 2 GiB budget), a convex one
// with its optimum at 0.9, a flat one, and multiplicative noise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace rtft::offload {

struct Curve {
  std::string name;
  std::function<double(double)> seconds;  // of the GPU fraction in [0, 1]

  double At(uint64_t g, uint64_t subgroups) const {
    return seconds(static_cast<double>(g) / static_cast<double>(subgroups));
  }
  double Min(uint64_t subgroups) const {
    double best = At(0, subgroups);
    for (uint64_t g = 1; g <= subgroups; ++g) best = std::min(best, At(g, subgroups));
    return best;
  }
};

// Linear between the points.
inline std::function<double(double)> Piecewise(std::vector<std::pair<double, double>> points) {
  return [points](double f) {
    for (size_t i = 1; i < points.size(); ++i)
      if (f <= points[i].first) {
        const auto [x0, y0] = points[i - 1];
        const auto [x1, y1] = points[i];
        return y0 + (y1 - y0) * (f - x0) / (x1 - x0);
      }
    return points.back().second;
  };
}

// rtft-bench offload on the H200 machine: CPU-only 0.296 s, the model's 18% 0.248 s, static
// splits 0.5 .. 1.0 as measured (best 0.222 s at one half).
inline Curve MeasuredH200() {
  return {"measured_h200", Piecewise({{0.0, 0.296},
                                      {0.18, 0.248},
                                      {0.5, 0.222},
                                      {0.7, 0.245},
                                      {0.8, 0.243},
                                      {0.9, 0.263},
                                      {1.0, 0.272}})};
}

inline Curve ConvexAt09() {
  return {"convex_0.9", [](double f) { return 0.15 + 0.4 * (f - 0.9) * (f - 0.9); }};
}

inline Curve Flat() {
  return {"flat", [](double) { return 0.25; }};
}

// Each measurement off by up to +-amplitude (uniform), as step times scatter on a busy host.
class Noise {
 public:
  Noise(uint32_t seed, double amplitude) : rng_(seed), dist_(-amplitude, amplitude) {}
  double operator()(double seconds) { return seconds * (1.0 + dist_(rng_)); }

 private:
  std::mt19937 rng_;
  std::uniform_real_distribution<double> dist_;
};

}  // namespace rtft::offload
