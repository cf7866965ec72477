// rtft._core.State: a StateProvider described from Python, one tensor or object at a time (the
// package's rtft.State fills it from a state_dict). Tensors are held through DLPack (tensor.h)
// and never copied; objects are Python callables that return and take bytes, called with the GIL
// from whichever thread rt-ft saves or restores on. The first exception a callable raises is kept
// so that the call that failed (checkpoint, restore, run) raises it again, traceback included.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "python/py_common.h"
#include "python/tensor.h"
#include "rtft/state.h"

namespace rtft::python {

class PyState final : public StateProvider {
 public:
  // Returns the tensor's logical dtype ("bool" for a boolean tensor saved as uint8). With
  // `global_shape` and `offset`, the tensor is this rank's shard of a larger one.
  std::string AddTensor(const std::string& name, py::handle tensor,
                        const std::optional<std::vector<int64_t>>& global_shape,
                        const std::optional<std::vector<int64_t>>& offset, bool changed_in_compute,
                        bool replicated = false);
  // Marks the shard `name` as one that this rank's whole data-parallel group holds
  // (ShardCoords::replicated): rtft.Protector does so for a DTensor's shard whose replicas are
  // that group.
  void SetReplicated(const std::string& name, bool replicated);
  // serialize() -> bytes when saving; deserialize(bytes) when restoring.
  void AddObject(const std::string& name, py::object serialize, py::object deserialize,
                 bool optional);
  // fn() after every restore of this state (StateProvider::Restored); None removes it.
  void SetRestored(py::object fn);

  Status Describe(StateDescription* out) const override;
  Status Restored() const override;

  // Once a Protector holds the state its description is fixed: adding to it is an error.
  void Freeze();
  bool frozen() const;
  // For Python: each tensor's fields, in the order added.
  py::list TensorInfo() const;
  std::vector<std::string> ObjectNames() const;
  uint64_t TensorBytes() const;

  // The first exception a callable of this state raised since the last call (GIL held), or None.
  py::object TakeException() const;
  // When `status` is not OK, raises that exception if there is one, else `status`; forgets the
  // exception either way.
  void ThrowFor(const Status& status) const;

 private:
  struct Tensor {
    TensorDesc desc;
    std::shared_ptr<TensorRef> ref;
  };
  // Where the callables keep the first exception they raised (guarded by the GIL); shared with
  // them, since copies of an ObjectDesc may outlive the state.
  struct ExceptionSlot {
    PyHandle exception;
  };
  void CheckName(const std::string& name, const TensorDesc* tensor);

  mutable std::mutex mu_;
  bool frozen_ = false;
  std::set<std::string> names_;
  std::vector<Tensor> tensors_;
  std::vector<ObjectDesc> objects_;
  PyHandle restored_;
  std::shared_ptr<ExceptionSlot> slot_ = std::make_shared<ExceptionSlot>();
};

}  // namespace rtft::python
