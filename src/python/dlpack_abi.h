// The DLPack C ABI (https://dmlc.github.io/dlpack, version 0.6 and later: the layout of
// DLManagedTensor has not changed since), as far as the module reads it: how PyTorch, NumPy, CuPy
// and JAX hand a tensor's memory to another library without a copy. Declared here so that the
// module builds where no dlpack.h is installed (libdlpack-dev is not on every machine).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rtft::python {

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,  // page-locked host memory: the host can read it
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
};

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLTensor) == 48, "DLTensor's layout is fixed by the DLPack ABI");
static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor's layout is fixed");

}  // namespace rtft::python
