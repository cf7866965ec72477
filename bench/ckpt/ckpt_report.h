// Turns the repeated measurements of one `rtft-bench ckpt` configuration into its JSON lines:
// one per variant (medians over the repeats) and a summary with the ratios and target checks.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_util.h"

namespace rtft::bench {

struct CkptMeasurements {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  bool gpu = false;
  double pcie_gbps = 0;  // pinned D2H bandwidth; 0 for host state
  bool page_cache_dropped = false;
  std::vector<VariantResult> raw, naive, rtft;  // one per repeat
  std::vector<RestoreResult> restore;           // one per repeat, of rtft's version
  bool gpu_restore = false;                     // restore_device_s was measured
};

// The targets of docs/benchmarks.md ("rtft-bench ckpt").
constexpr double kPersistOfRawTarget = 0.95;
constexpr double kBlockingOfNaiveTarget = 0.02;
constexpr double kCaptureOfPcieTarget = 0.90;
// Restore (into host or GPU memory) at this share of the disk's raw read bandwidth or more.
constexpr double kRestoreOfRawReadTarget = 0.90;
// With a pool smaller than the state, the update waits at most this times the time the disk
// needs to take the part that does not fit: (state - pool) / raw.
constexpr double kBlockingOfDrainTarget = 1.2;

void EmitCkptResults(const CkptMeasurements& m, JsonLines* out);

}  // namespace rtft::bench
