#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "tools/rtft_health/checks.h"

namespace rtft::health {

double HostCopyGbPerS(uint64_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes, 0);  // both touched before the clock starts
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * bytes / s / 1e9);
    from[i] = static_cast<char>(to[bytes - 1 - i] + 1);  // the copies are used
  }
  return best;
}

}  // namespace rtft::health
