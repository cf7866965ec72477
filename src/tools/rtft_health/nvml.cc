#include "tools/rtft_health/nvml.h"

#include <dlfcn.h>

namespace rtft::health {
namespace {

// NVML's C ABI (nvml.h): return codes are ints, 0 success; devices are opaque pointers.
using Ret = int;
using Device = void*;
constexpr int kUncorrected = 1;           // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatile = 0;              // NVML_VOLATILE_ECC
constexpr unsigned kRecoveryField = 230;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
constexpr Ret kNotSupported = 3;          // NVML_ERROR_NOT_SUPPORTED

// nvmlFieldValue_t.
union Value {
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  signed long long sll;
  signed int si;
  unsigned short us;
};
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;
  Ret ret;
  Value value;
};

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

const char* RecoveryActionName(uint32_t action) {
  switch (action) {
    case 0:
      return "none";
    case 1:
      return "GPU reset";
    case 2:
      return "node reboot";
    case 3:
      return "drain peer-to-peer traffic";
    case 4:
      return "drain and reset";
  }
  return "unknown";
}

NvmlView ReadNvml(int index) {
  NvmlView v;
  // Kept open for the process's short life: NVML's own threads may outlive nvmlShutdown.
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    v.error = "libnvidia-ml.so.1 not found (no NVIDIA driver here)";
    return v;
  }
  auto init = Symbol<Ret (*)()>(lib, "nvmlInit_v2");
  auto shutdown = Symbol<Ret (*)()>(lib, "nvmlShutdown");
  auto handle = Symbol<Ret (*)(unsigned, Device*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto ecc =
      Symbol<Ret (*)(Device, int, int, unsigned long long*)>(lib, "nvmlDeviceGetTotalEccErrors");
  auto pending = Symbol<Ret (*)(Device, int*)>(lib, "nvmlDeviceGetRetiredPagesPendingStatus");
  auto fields = Symbol<Ret (*)(Device, int, FieldValue*)>(lib, "nvmlDeviceGetFieldValues");
  auto text = Symbol<const char* (*)(Ret)>(lib, "nvmlErrorString");
  if (!init || !shutdown || !handle) {
    v.error = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByIndex_v2";
    return v;
  }
  auto why = [&](const char* call, Ret r) {
    return std::string(call) + ": " + (text ? text(r) : ("NVML error " + std::to_string(r)));
  };
  if (Ret r = init(); r != 0) {
    v.error = why("nvmlInit", r);
    return v;
  }
  v.loaded = true;
  Device dev = nullptr;
  if (Ret r = handle(static_cast<unsigned>(index), &dev); r != 0) {
    v.error = why("nvmlDeviceGetHandleByIndex", r);
    (void)shutdown();
    return v;
  }
  // Each query may be unsupported (no ECC on the board, no page retirement on newer GPUs, a
  // driver without the recovery field): then it says nothing.
  unsigned long long errors = 0;
  if (ecc && ecc(dev, kUncorrected, kVolatile, &errors) == 0) v.ecc_uncorrected_volatile = errors;
  int is_pending = 0;
  if (pending && pending(dev, &is_pending) == 0) v.retired_pages_pending = is_pending != 0;
  if (fields) {
    FieldValue f{};
    f.field_id = kRecoveryField;
    if (fields(dev, 1, &f) == 0 && f.ret == 0)
      v.recovery_action = f.value.ui;
    else if (f.ret != 0 && f.ret != kNotSupported && v.error.empty())
      v.error = why("the recovery action field", f.ret);
  }
  (void)shutdown();
  return v;
}

}  // namespace rtft::health
