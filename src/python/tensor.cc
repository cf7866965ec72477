// Tensors from Python through DLPack (tensor.h): every field the producer hands over is checked
// before rt-ft uses it, since a tensor-like object from Python may say anything.
#include "python/tensor.h"

#include <string>

namespace rtft::python {

namespace {

constexpr int kMaxDims = 32;  // as the checkpoint format allows (docs/format.md, "Limits")

std::string DlDtypeText(const DLDataType& t) {
  static const char* const kCodes[] = {"int",    "uint",    "float", "handle",
                                       "bfloat", "complex", "bool"};
  const std::string code = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  std::string text = code + std::to_string(t.bits);
  if (t.lanes != 1) text += "x" + std::to_string(t.lanes);
  return text;
}

// rt-ft's dtype for a DLPack one; false when rt-ft has none.
bool ToDType(const DLDataType& t, DType* dtype, bool* boolean) {
  *boolean = false;
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 16) return *dtype = DType::kFloat16, true;
      if (t.bits == 32) return *dtype = DType::kFloat32, true;
      if (t.bits == 64) return *dtype = DType::kFloat64, true;
      return false;
    case kDLBfloat:
      return t.bits == 16 ? (*dtype = DType::kBFloat16, true) : false;
    case kDLInt:
      if (t.bits == 8) return *dtype = DType::kInt8, true;
      if (t.bits == 32) return *dtype = DType::kInt32, true;
      if (t.bits == 64) return *dtype = DType::kInt64, true;
      return false;
    case kDLUInt:
      return t.bits == 8 ? (*dtype = DType::kUInt8, true) : false;
    case kDLBool:
      return t.bits == 8 ? (*boolean = true, *dtype = DType::kUInt8, true) : false;
    default:
      return false;
  }
}

// PyTorch before 2.0 hands torch.bool over as uint8: its own dtype says what the bytes mean.
bool SaysBool(py::handle object) {
  if (!py::hasattr(object, "dtype")) return false;
  try {
    const std::string name = py::str(object.attr("dtype")).cast<std::string>();
    return name == "torch.bool" || name == "bool";
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return false;
  }
}

[[noreturn]] void Refuse(const std::string& what, const std::string& why) {
  throw StatusError(Status::InvalidArgument(what + ": " + why));
}

}  // namespace

std::shared_ptr<TensorRef> TensorRef::From(py::handle object, const std::string& what) {
  if (!py::hasattr(object, "__dlpack__"))
    throw py::type_error(what + " is a " +
                         py::str(object.get_type().attr("__name__")).cast<std::string>() +
                         ", not a tensor (an object with __dlpack__: torch.Tensor, numpy.ndarray)");
  py::object source = py::reinterpret_borrow<py::object>(object);
  // A parameter requires grad, and torch refuses to export it; detach() shares its memory.
  if (py::hasattr(source, "requires_grad") && py::hasattr(source, "detach") &&
      py::bool_(source.attr("requires_grad")))
    source = source.attr("detach")();
  // torch before 2.0 refuses to export torch.bool; its uint8 view is the same bytes.
  if (SaysBool(source) && py::hasattr(source, "view") &&
      py::str(source.get_type().attr("__module__")).cast<std::string>().rfind("torch", 0) == 0)
    source = source.attr("view")(py::module_::import("torch").attr("uint8"));
  py::object capsule = source.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    Refuse(what, "__dlpack__ returned no DLPack capsule (or one already used)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // Consumed: the capsule no longer frees the tensor; the TensorRef calls its deleter.
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  std::shared_ptr<TensorRef> ref(new TensorRef(managed));
  ref->Check(object, what);
  return ref;
}

TensorRef::~TensorRef() {
  if (managed_ == nullptr || managed_->deleter == nullptr) return;
  // Producers free through Python (NumPy drops its array's reference): with the GIL, while the
  // interpreter runs; at exit the memory is left to the process's end.
  if (!InterpreterRunning()) return;
  py::gil_scoped_acquire gil;
  managed_->deleter(managed_);
}

void TensorRef::Check(py::handle object, const std::string& what) {
  const DLTensor& t = managed_->dl_tensor;
  bool boolean = false;
  if (!ToDType(t.dtype, &dtype_, &boolean))
    Refuse(what, "dtype " + DlDtypeText(t.dtype) +
                     " is not one rt-ft saves (float32, float16, bfloat16, float64, int8, int32, "
                     "int64, uint8, bool as uint8)");
  if (dtype_ == DType::kUInt8 && SaysBool(object)) boolean = true;
  logical_ = boolean ? "bool" : DTypeName(dtype_);
  if (t.ndim < 0 || t.ndim > kMaxDims)
    Refuse(what, std::to_string(t.ndim) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
  if (t.ndim > 0 && t.shape == nullptr) Refuse(what, "DLPack gave no shape");
  shape_.assign(t.shape, t.shape + t.ndim);
  for (int64_t d : shape_) {
    if (d < 0) Refuse(what, "a negative dimension");
    uint64_t n = 0;
    if (__builtin_mul_overflow(elements_, static_cast<uint64_t>(d), &n) ||
        __builtin_mul_overflow(n, static_cast<uint64_t>(DTypeSize(dtype_)), &n) ||
        n > (uint64_t{1} << 62))
      Refuse(what, "its shape holds more bytes than memory can");
    elements_ = static_cast<uint64_t>(d) * elements_;
  }
  // Contiguous in row-major order: rt-ft copies the bytes as they lie. A dimension of one (or an
  // empty tensor) may have any stride.
  if (t.strides != nullptr && elements_ > 0) {
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (shape_[d] != 1 && t.strides[d] != expected)
        Refuse(what,
               "not contiguous (strides do not follow its shape in row-major order); "
               "describe a contiguous tensor (rt-ft saves and restores memory in place, so "
               "a .contiguous() copy would not be the tensor the model uses)");
      expected *= shape_[d];
    }
  }
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      memory_ = MemoryKind::kHost;
      break;
    case kDLCUDA:
      memory_ = MemoryKind::kDevice;
      if (t.device.device_id < 0) Refuse(what, "a negative CUDA device");
      device_ = t.device.device_id;
      break;
    default:
      Refuse(what, "memory of DLPack device type " + std::to_string(t.device.device_type) +
                       " (rt-ft reads host and CUDA device memory; managed, ROCm and other "
                       "memory are not supported)");
  }
  if (t.data == nullptr && elements_ > 0) Refuse(what, "no data pointer");
  data_ = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
}

TensorDesc TensorRef::Desc(const std::string& name) const {
  TensorDesc d;
  d.name = name;
  d.dtype = dtype_;
  d.shape = shape_;
  d.data = data_;
  d.memory = memory_;
  d.device = device_;
  return d;
}

}  // namespace rtft::python
