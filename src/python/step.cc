// The step functions of rtft._core.Protector (step.h).
#include "python/step.h"

#include <cstring>
#include <utility>
#include <vector>

#include "python/comm.h"
#include "python/tensor.h"

namespace rtft::python {

py::object Borrow(Communicator* c, const Valid& valid) {
  if (c == nullptr) return py::none();
  return py::cast(std::make_unique<PyComm>(c, valid));
}

namespace {

// The gradient buffer a `local` step function named, held until the next one: the replay digests
// it after the function returned, without the GIL.
struct GradientHold {
  std::vector<std::shared_ptr<TensorRef>> refs;
  std::vector<char> joined;  // several tensors, one after another
};

py::object MakeContext(const StepContext& c, const Valid& valid) {
  auto ctx = std::make_unique<PyStepContext>();
  ctx->step = c.step;
  ctx->epoch = c.epoch;
  ctx->rank = c.rank;
  ctx->world_size = c.world_size;
  ctx->device = c.device;
  ctx->stream = reinterpret_cast<uintptr_t>(c.stream);
  ctx->place = c.place;
  ctx->comm = Borrow(c.comm, valid);
  ctx->tensor = Borrow(c.tensor, valid);
  ctx->pipeline = Borrow(c.pipeline, valid);
  ctx->data = c.data == c.comm ? ctx->comm : Borrow(c.data, valid);
  ctx->recovered = c.recovered ? py::cast(*c.recovered) : py::none();
  ctx->data_rank = c.data_rank;
  ctx->replaying = c.replaying;
  return py::cast(std::move(ctx));
}

// ctx.gradients after `local`: a host tensor, or a list or tuple of them (copied one after
// another into one buffer), into c.gradients and c.gradient_bytes. None leaves them unset, which
// the replay reports.
void TakeGradients(py::handle g, GradientHold* hold, StepContext& c) {
  hold->refs.clear();
  hold->joined.clear();
  if (g.is_none()) return;
  std::vector<py::handle> items;
  if (py::hasattr(g, "__dlpack__")) {
    items.push_back(g);
  } else if (py::isinstance<py::list>(g) || py::isinstance<py::tuple>(g)) {
    for (py::handle item : g) items.push_back(item);
  } else {
    throw StatusError(
        Status::InvalidArgument("ctx.gradients is a tensor or a list of tensors, not a " +
                                py::str(g.get_type().attr("__name__")).cast<std::string>()));
  }
  if (items.empty()) return;  // an empty list names nothing, as None
  uint64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string what = "ctx.gradients" + (items.size() > 1 || !py::hasattr(g, "__dlpack__")
                                                    ? "[" + std::to_string(i) + "]"
                                                    : std::string());
    std::shared_ptr<TensorRef> ref = TensorRef::From(items[i], what);
    if (ref->memory() != MemoryKind::kHost)
      throw StatusError(Status::InvalidArgument(
          what +
          " is in device memory: the replay digests host gradients (copy them to the "
          "host, e.g. into one flat CPU tensor, before local returns)"));
    total += ref->bytes();
    hold->refs.push_back(std::move(ref));
  }
  if (hold->refs.size() == 1) {
    c.gradients = hold->refs[0]->data();
  } else {
    hold->joined.resize(total);
    uint64_t at = 0;
    for (const auto& ref : hold->refs) {
      if (ref->bytes() > 0) std::memcpy(hold->joined.data() + at, ref->data(), ref->bytes());
      at += ref->bytes();
    }
    c.gradients = hold->joined.data();
  }
  c.gradient_bytes = total;
  // One type for all of them, or bytes.
  c.gradient_dtype = hold->refs[0]->dtype();
  for (const auto& ref : hold->refs)
    if (ref->dtype() != c.gradient_dtype) c.gradient_dtype = DType::kUInt8;
}

}  // namespace

StepFn WrapStep(py::object fn, const std::string& what, std::shared_ptr<Pending> pending,
                bool names_gradients) {
  if (fn.is_none()) return nullptr;
  auto hold = names_gradients ? std::make_shared<GradientHold>() : nullptr;
  if (!PyCallable_Check(fn.ptr())) throw py::type_error(what + " must be callable");
  PyHandle h = Hold(std::move(fn));
  return [h, what, pending, hold](StepContext& c) {
    return CallBack(pending, what, [&]() -> Status {
      Valid valid = std::make_shared<std::atomic<bool>>(true);
      struct Expire {
        Valid v;
        Pending* p;
        ~Expire() {
          v->store(false);
          p->step.reset();
        }
      } expire{valid, pending.get()};
      pending->step = valid;
      py::object ctx = MakeContext(c, valid);
      h->get()(ctx);
      if (hold) {
        try {
          auto* py_ctx = ctx.cast<PyStepContext*>();
          TakeGradients(py_ctx->gradients, hold.get(), c);
          c.nonfinite = py_ctx->nonfinite;
        } catch (const py::builtin_exception& e) {  // not a tensor: an error of the call
          return Status::InvalidArgument(e.what());
        }
      }
      return Status::Ok();
    });
  };
}

void BindStepContext(py::module_& m) {
  py::class_<PyStepContext>(m, "StepContext", "What a step function sees (valid for its step)")
      .def_readonly("step", &PyStepContext::step)
      .def_readonly("epoch", &PyStepContext::epoch)
      .def_readonly("rank", &PyStepContext::rank)
      .def_readonly("world_size", &PyStepContext::world_size)
      .def_readonly("device", &PyStepContext::device)
      .def_readonly("stream", &PyStepContext::stream)
      .def_readonly("place", &PyStepContext::place)
      .def_readonly("comm", &PyStepContext::comm)
      .def_readonly("tensor", &PyStepContext::tensor)
      .def_readonly("pipeline", &PyStepContext::pipeline)
      .def_readonly("data", &PyStepContext::data)
      .def_readonly("recovered", &PyStepContext::recovered)
      .def_readonly("data_rank", &PyStepContext::data_rank,
                    "local: the data-parallel index whose data the step uses (a peer's while "
                    "replaying)")
      .def_readonly("replaying", &PyStepContext::replaying,
                    "local: this is a peer's step, run here to check its gradients")
      .def_readwrite("gradients", &PyStepContext::gradients,
                     "local sets it: the host tensor (or list of them) its gradients are in")
      .def_readwrite("nonfinite", &PyStepContext::nonfinite,
                     "local sets it: its loss or gradients are not finite (check_finite)");
}

}  // namespace rtft::python
