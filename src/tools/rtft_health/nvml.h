// NVML, loaded at run time (dlopen of libnvidia-ml.so.1): rtft-health links no NVML library, so
// it runs where there is none (CI, a host without the driver) and says so. Only the calls the
// health check makes, declared here with NVML's C ABI (its nvml.h is not part of the toolkit
// this project builds with).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rtft::health {

// What NVML tells of one device; each field is empty where NVML or the device does not say.
struct NvmlView {
  bool loaded = false;  // libnvidia-ml.so.1 was found and initialised
  std::string error;    // why it was not, or the first call that failed
  std::optional<uint64_t> ecc_uncorrected_volatile;  // uncorrected ECC errors since the last reset
  std::optional<bool> retired_pages_pending;         // pages waiting for retirement (a reset)
  std::optional<uint32_t> recovery_action;           // the driver's: 0 none, else what it asks
};

// The recovery action's name (NVML_GPU_RECOVERY_ACTION_*).
const char* RecoveryActionName(uint32_t action);

// NVML's view of device `index` (NVML's enumeration, as CUDA_DEVICE_ORDER=PCI_BUS_ID orders it).
NvmlView ReadNvml(int index);

}  // namespace rtft::health
