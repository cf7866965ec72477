// A tensor's memory as its producer (PyTorch, NumPy, ...) hands it over through DLPack: pointer,
// dtype, shape and device, checked (a dtype rt-ft has, contiguous, host or CUDA memory) and held
// for as long as rt-ft may read or write it. No copy is made and no torch library is linked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "python/dlpack_abi.h"
#include "python/py_common.h"
#include "rtft/state.h"

namespace rtft::python {

class TensorRef {
 public:
  // From any object with __dlpack__ (a torch.Tensor that requires grad is detached first: the
  // same memory). Raises TypeError for an object that is no tensor, rtft.InvalidArgumentError
  // for a dtype rt-ft lacks, a non-contiguous tensor or memory rt-ft cannot reach. `what` names
  // the tensor in the error. Call with the GIL held.
  static std::shared_ptr<TensorRef> From(py::handle object, const std::string& what);
  ~TensorRef();  // the producer's deleter: the memory may go
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;

  DType dtype() const { return dtype_; }
  // "bool" for a boolean tensor (saved as uint8), else the name of dtype().
  const std::string& logical_dtype() const { return logical_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  void* data() const { return data_; }
  MemoryKind memory() const { return memory_; }
  int device() const { return device_; }
  uint64_t elements() const { return elements_; }
  uint64_t bytes() const { return elements_ * DTypeSize(dtype_); }
  // A TensorDesc of this memory named `name` (no shard coordinates).
  TensorDesc Desc(const std::string& name) const;

 private:
  explicit TensorRef(DLManagedTensor* managed) : managed_(managed) {}
  void Check(py::handle object, const std::string& what);

  DLManagedTensor* managed_;
  DType dtype_ = DType::kFloat32;
  std::string logical_;
  std::vector<int64_t> shape_;
  void* data_ = nullptr;
  MemoryKind memory_ = MemoryKind::kHost;
  int device_ = 0;
  uint64_t elements_ = 1;
};

}  // namespace rtft::python
