// rtft-health's device check in a build without CUDA: nothing to check.
#include "tools/rtft_health/checks.h"

namespace rtft::health {

GpuResult CheckGpu(int, int, uint64_t) {
  GpuResult r;
  r.skipped = "rt-ft was built without CUDA";
  return r;
}

}  // namespace rtft::health
