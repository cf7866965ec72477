// rtft._core.State (state.h) and the state helpers of include/rtft/state.h.
#include "python/state.h"

#include <pybind11/stl.h>

#include <utility>

#include "python/bind.h"

namespace rtft::python {

namespace {

StatusOr<std::string> BytesOf(py::handle value, const std::string& what) {
  if (PyBytes_Check(value.ptr())) return std::string(py::reinterpret_borrow<py::bytes>(value));
  if (PyByteArray_Check(value.ptr()))
    return std::string(PyByteArray_AsString(value.ptr()), PyByteArray_Size(value.ptr()));
  return Status::InvalidArgument(what + " returned a " +
                                 py::str(value.get_type().attr("__name__")).cast<std::string>() +
                                 ", not bytes");
}

}  // namespace

void PyState::CheckName(const std::string& name, const TensorDesc* tensor) {
  if (frozen_)
    throw StatusError(Status::FailedPrecondition(
        "this State is protected: its description is fixed (describe everything before "
        "Protector.protect)"));
  StateDescription one;
  if (tensor != nullptr) {
    one.tensors.push_back(*tensor);
  } else {
    one.objects.push_back(ObjectDesc{name, [] { return StatusOr<std::string>(""); }, {}});
  }
  ThrowIfError(ValidateDescription(one));
  if (names_.count(name) > 0)
    throw StatusError(Status::InvalidArgument("name '" + name + "' is used twice in one state"));
}

std::string PyState::AddTensor(const std::string& name, py::handle tensor,
                               const std::optional<std::vector<int64_t>>& global_shape,
                               const std::optional<std::vector<int64_t>>& offset,
                               bool changed_in_compute, bool replicated) {
  if (global_shape.has_value() != offset.has_value())
    throw StatusError(Status::InvalidArgument("tensor '" + name +
                                              "': a shard needs both global_shape and offset"));
  if (replicated && !global_shape)
    throw StatusError(Status::InvalidArgument(
        "tensor '" + name + "': replicated applies to a shard (global_shape and offset)"));
  std::shared_ptr<TensorRef> ref = TensorRef::From(tensor, "tensor '" + name + "'");
  TensorDesc desc = ref->Desc(name);
  desc.changed_in_compute = changed_in_compute;
  if (global_shape) {
    desc.shard.global_shape = *global_shape;
    desc.shard.offset = *offset;
    desc.shard.replicated = replicated;
  }
  std::lock_guard<std::mutex> lock(mu_);
  CheckName(name, &desc);
  names_.insert(name);
  tensors_.push_back(Tensor{std::move(desc), ref});
  return ref->logical_dtype();
}

void PyState::AddObject(const std::string& name, py::object serialize, py::object deserialize,
                        bool optional) {
  if (!PyCallable_Check(serialize.ptr()) || !PyCallable_Check(deserialize.ptr()))
    throw py::type_error("object '" + name + "': serialize and deserialize must be callables");
  ObjectDesc o;
  o.name = name;
  o.optional = optional;
  PyHandle save = Hold(std::move(serialize)), load = Hold(std::move(deserialize));
  auto slot = slot_;
  o.serialize = [slot, save, name]() -> StatusOr<std::string> {
    std::string out;
    Status s = CallPython(slot, "serializing object '" + name + "'", [&]() -> Status {
      py::object value = save->get()();
      StatusOr<std::string> bytes = BytesOf(value, "the serializer of object '" + name + "'");
      if (!bytes.ok()) return bytes.status();
      out = std::move(bytes).value();
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return out;
  };
  o.deserialize = [slot, load, name](const std::string& bytes) -> Status {
    return CallPython(slot, "restoring object '" + name + "'", [&]() -> Status {
      load->get()(py::bytes(bytes));
      return Status::Ok();
    });
  };
  std::lock_guard<std::mutex> lock(mu_);
  CheckName(name, nullptr);
  names_.insert(name);
  objects_.push_back(std::move(o));
}

void PyState::SetRestored(py::object fn) {
  if (!fn.is_none() && !PyCallable_Check(fn.ptr()))
    throw py::type_error("restored must be a callable or None");
  PyHandle h = fn.is_none() ? nullptr : Hold(std::move(fn));
  std::lock_guard<std::mutex> lock(mu_);
  restored_ = std::move(h);
}

Status PyState::Describe(StateDescription* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Tensor& t : tensors_) out->tensors.push_back(t.desc);
  out->objects.insert(out->objects.end(), objects_.begin(), objects_.end());
  return Status::Ok();
}

Status PyState::Restored() const {
  PyHandle fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = restored_;
  }
  if (!fn) return Status::Ok();
  return CallPython(slot_, "the state's restored() callback", [&]() -> Status {
    fn->get()();
    return Status::Ok();
  });
}

void PyState::Freeze() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = true;
}

bool PyState::frozen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frozen_;
}

py::list PyState::TensorInfo() const {
  std::lock_guard<std::mutex> lock(mu_);
  py::list out;
  for (const Tensor& t : tensors_) {
    py::dict d;
    d["name"] = t.desc.name;
    d["dtype"] = DTypeName(t.desc.dtype);
    d["logical_dtype"] = t.ref->logical_dtype();
    d["shape"] = t.desc.shape;
    d["memory"] = t.desc.memory == MemoryKind::kHost ? "host" : "device";
    d["device"] = t.desc.device;
    d["nbytes"] = t.desc.bytes();
    d["data_ptr"] = reinterpret_cast<uintptr_t>(t.desc.data);
    d["changed_in_compute"] = t.desc.changed_in_compute;
    if (t.desc.shard.sharded()) {
      d["global_shape"] = t.desc.shard.global_shape;
      d["offset"] = t.desc.shard.offset;
      d["replicated"] = t.desc.shard.replicated;
    }
    out.append(d);
  }
  return out;
}

std::vector<std::string> PyState::ObjectNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const ObjectDesc& o : objects_) out.push_back(o.name);
  return out;
}

uint64_t PyState::TensorBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const Tensor& t : tensors_) n += t.desc.bytes();
  return n;
}

py::object PyState::TakeException() const {
  PyHandle h = std::move(slot_->exception);
  slot_->exception = nullptr;
  if (!h) return py::none();
  return py::reinterpret_borrow<py::object>(h->get());
}

void PyState::ThrowFor(const Status& status) const {
  py::object exc = TakeException();
  if (status.ok()) return;
  if (!exc.is_none()) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
  }
  ThrowIfError(status);
}

void PyState::SetReplicated(const std::string& name, bool replicated) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Tensor& t : tensors_) {
    if (t.desc.name != name) continue;
    if (!t.desc.shard.sharded())
      throw StatusError(Status::InvalidArgument(
          "tensor '" + name + "': replicated applies to a shard (global_shape and offset)"));
    t.desc.shard.replicated = replicated;
    return;
  }
  throw StatusError(Status::InvalidArgument("no tensor named '" + name + "' in this state"));
}

void BindState(py::module_& m) {
  py::class_<PyState, std::shared_ptr<PyState>>(
      m, "State",
      "A state described for rt-ft, tensor by tensor and object by object (use rtft.State)")
      .def(py::init<>())
      .def("add_tensor", &PyState::AddTensor, py::arg("name"), py::arg("tensor"),
           py::arg("global_shape") = py::none(), py::arg("offset") = py::none(),
           py::arg("changed_in_compute") = false, py::arg("replicated") = false,
           "Describes a tensor (any object with __dlpack__) by its memory; returns its logical "
           "dtype. With global_shape and offset it is this rank's shard of a larger tensor; "
           "changed_in_compute: the step's compute writes it (a module buffer), so the "
           "protector copies it when the step begins; replicated: every rank of this rank's "
           "data-parallel group holds the same shard (HSDP's)")
      .def("_set_replicated", &PyState::SetReplicated, py::arg("name"), py::arg("replicated"),
           "Marks a shard as held by this rank's whole data-parallel group (rtft.Protector)")
      .def("add_object", &PyState::AddObject, py::arg("name"), py::arg("serialize"),
           py::arg("deserialize"), py::arg("optional") = false,
           "Describes an object: serialize() -> bytes when saving, deserialize(bytes) when "
           "restoring; an optional one missing from a checkpoint is skipped, not an error")
      .def("set_restored", &PyState::SetRestored, py::arg("fn"),
           "fn() runs after every restore of the state (a checkpoint's or a recovery's)")
      .def("tensor_info", &PyState::TensorInfo)
      .def("object_names", &PyState::ObjectNames)
      .def_property_readonly("nbytes", &PyState::TensorBytes)
      .def_property_readonly("frozen", &PyState::frozen);
  m.def(
      "split_evenly",
      [](int64_t n, int parts, int index) {
        if (n < 0 || parts <= 0 || index < 0 || index >= parts)
          throw StatusError(Status::InvalidArgument(
              "split_evenly: needs n >= 0, parts > 0 and 0 <= index < parts"));
        EvenSplit s = SplitEvenly(n, parts, index);
        return std::make_pair(s.offset, s.count);
      },
      py::arg("n"), py::arg("parts"), py::arg("index"),
      "(offset, count) of part `index` when n rows are split evenly over `parts` in order");
}

}  // namespace rtft::python
