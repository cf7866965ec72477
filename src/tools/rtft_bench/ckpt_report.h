// Turns the repeated measurements of one `rtft-bench ckpt` configuration into its JSON lines:
// one per variant (medians over the repeats) and a summary with the ratios and target checks.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/rtft_bench/bench_util.h"
#include "tools/rtft_bench/ckpt_variants.h"

namespace rtft::bench {

struct CkptMeasurements {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  bool gpu = false;
  double pcie_gbps = 0;  // pinned D2H bandwidth; 0 for host state
  bool page_cache_dropped = false;
  std::vector<VariantResult> raw, naive, rtft;  // one per repeat
};

// The thresholds of shared/BENCHMARKS.md.
constexpr double kPersistOfRawTarget = 0.90;
constexpr double kTimesNaiveTarget = 4.0;
constexpr double kBlockingOfNaiveTarget = 0.05;
constexpr double kCaptureOfPcieTarget = 0.85;

void EmitCkptResults(const CkptMeasurements& m, JsonLines* out);

}  // namespace rtft::bench
