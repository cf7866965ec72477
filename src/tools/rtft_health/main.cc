// rtft-health: is this node's GPU (and host) fit to take a rank, or to keep one? A short-lived
// process that dp-launch's agent starts periodically (docs/launcher.md, "Health check"):
// dp-launch itself never touches CUDA or NVML. It reads NVML's view of the device (loaded at run
// time: uncorrected ECC errors, pages waiting for retirement, the recovery action the driver asks
// for), runs a GEMM whose every element is compared with the exact answer, times a
// device-to-host copy and the host's memory copy rate, and prints one JSON line. `--passive` (a
// slot whose rank holds the device) leaves out the GEMM and the copy: no CUDA context beside the
// rank's. Exit 0: healthy; 1: not, the line's "reasons" say why; 2: usage.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/fault_point.h"
#include "tools/rtft_health/checks.h"
#include "tools/rtft_health/nvml.h"

namespace {

constexpr int kHealthy = 0;
constexpr int kUnhealthy = 1;
constexpr int kUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace rtft::health;
  CLI::App app{"rtft-health: checks one GPU and its host before a spare may take a rank"};
  int device = -1;
  int gemm_n = 512;
  int copy_mb = 64;
  double min_tflops = 0, min_d2h = 0, min_host = 0;
  bool passive = false;
  app.add_option("--device", device, "the CUDA device to check (-1: the host only)")
      ->capture_default_str();
  app.add_option("--gemm-n", gemm_n, "the GEMM's size (n x n x n, 64 to 8192)")
      ->capture_default_str();
  app.add_option("--copy-mb", copy_mb, "MiB copied device-to-host and on the host (1 to 4096)")
      ->capture_default_str();
  app.add_option("--min-gemm-tflops", min_tflops, "unhealthy below this GEMM rate (0: no floor)")
      ->capture_default_str();
  app.add_option("--min-d2h-gbs", min_d2h, "unhealthy below this copy rate (0: no floor)")
      ->capture_default_str();
  app.add_option("--min-host-gbs", min_host,
                 "unhealthy below this host memory copy rate (0: no floor)")
      ->capture_default_str();
  app.add_flag("--passive", passive,
               "NVML's view and the host only: no CUDA context (a rank holds the device)");
  CLI11_PARSE(app, argc, argv);
  if (device < -1 || device > 1023 || gemm_n < 64 || gemm_n > 8192 || copy_mb < 1 ||
      copy_mb > 4096 || min_tflops < 0 || min_d2h < 0 || min_host < 0) {
    std::cerr << "rtft-health: --device -1..1023, --gemm-n 64..8192, --copy-mb 1..4096, floors "
                 ">= 0\n";
    return kUsage;
  }
  const auto start = std::chrono::steady_clock::now();
  // Test hook: "health.check:exit=1" fails the check here (docs/testing.md).
  rtft::FaultPoint("health.check");
  nlohmann::json out{{"device", device}};
  std::vector<std::string> reasons;
  const uint64_t copy = uint64_t(copy_mb) << 20;

  if (device >= 0) {
    const NvmlView nv = ReadNvml(device);
    out["nvml"] = nv.loaded ? "read" : "absent";
    if (!nv.error.empty()) out["nvml_note"] = nv.error;
    if (nv.ecc_uncorrected_volatile) {
      out["ecc_uncorrected"] = *nv.ecc_uncorrected_volatile;
      if (*nv.ecc_uncorrected_volatile > 0)
        reasons.push_back(std::to_string(*nv.ecc_uncorrected_volatile) +
                          " uncorrected ECC error(s) since the last reset");
    }
    if (nv.retired_pages_pending) {
      out["retired_pages_pending"] = *nv.retired_pages_pending;
      if (*nv.retired_pages_pending) reasons.push_back("retired pages wait for a reset");
    }
    if (nv.recovery_action) {
      out["recovery_action"] = RecoveryActionName(*nv.recovery_action);
      if (*nv.recovery_action != 0)
        reasons.push_back(std::string("the driver asks for a recovery: ") +
                          RecoveryActionName(*nv.recovery_action));
    }
    GpuResult g;
    if (passive) {
      g.skipped = "passive: the slot's rank holds the device";
    } else {
      g = CheckGpu(device, gemm_n, copy);
    }
    if (!g.skipped.empty()) out["gpu"] = "skipped: " + g.skipped;
    if (!g.name.empty()) out["gpu"] = g.name;
    if (!g.error.empty()) reasons.push_back(g.error);
    if (g.ran) {
      out["gemm_exact"] = g.gemm_exact;
      out["gemm_tflops"] = g.gemm_tflops;
      out["d2h_gb_per_s"] = g.d2h_gb_per_s;
      if (!g.gemm_exact)
        reasons.push_back("the GEMM computed " + std::to_string(g.gemm_wrong) +
                          " wrong element(s) of " + std::to_string(int64_t(gemm_n) * gemm_n));
      if (min_tflops > 0 && g.gemm_tflops < min_tflops)
        reasons.push_back("GEMM at " + std::to_string(g.gemm_tflops) + " TFLOP/s, below " +
                          std::to_string(min_tflops));
      if (min_d2h > 0 && g.d2h_gb_per_s < min_d2h)
        reasons.push_back("device-to-host copy at " + std::to_string(g.d2h_gb_per_s) +
                          " GB/s, below " + std::to_string(min_d2h));
    }
  }
  const double host = HostCopyGbPerS(copy);
  out["host_gb_per_s"] = host;
  if (min_host > 0 && host < min_host)
    reasons.push_back("host memory copy at " + std::to_string(host) + " GB/s, below " +
                      std::to_string(min_host));
  out["healthy"] = reasons.empty();
  out["reasons"] = reasons;
  out["took_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << out.dump() << std::endl;
  return reasons.empty() ? kHealthy : kUnhealthy;
}
