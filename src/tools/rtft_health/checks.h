// The measurements of rtft-health (docs/launcher.md, "Health check"): a GEMM on the device whose
// every element is checked against the exact answer, a device-to-host copy, a host memory copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rtft::health {

struct GpuResult {
  bool ran = false;     // a device was there and the check ran to its end
  std::string error;    // a CUDA or cuBLAS call that failed (the device is then unhealthy)
  std::string skipped;  // why nothing ran (no device, built without CUDA): not a failure
  std::string name;
  bool gemm_exact = false;
  uint64_t gemm_wrong = 0;  // elements of the product that differ from the exact answer
  double gemm_tflops = 0;
  double d2h_gb_per_s = 0;
};

// Device `device` (a CUDA ordinal): an n x n SGEMM of small integers, exact in float, compared
// element by element, and a copy of `copy_bytes` to pinned host memory, timed.
GpuResult CheckGpu(int device, int n, uint64_t copy_bytes);

// The host's memory copy rate over `bytes`, GB/s (bytes read plus written, per second).
double HostCopyGbPerS(uint64_t bytes);

}  // namespace rtft::health
