// The step functions of rtft._core.Protector: the StepContext a Python step function sees, and
// the wrapping of a Python callable as a StepFn (its exception kept for run() to raise again; for
// `local`, the gradient buffer it names taken for the replay's digest).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "python/py_common.h"
#include "rtft/protect.h"

namespace rtft::python {

using Valid = std::shared_ptr<std::atomic<bool>>;

// The first exception a callable of the protector raised, and the validity of the step that
// runs now (guarded by the GIL).
struct Pending {
  PyHandle exception;
  // Set while a step function runs: `protector.comm` taken inside it is that step's, gone with
  // it (a recovery inside run() frees the communicators of the epoch it leaves).
  Valid step;
};

struct PyStepContext {
  uint64_t step = 0, epoch = 0;
  int rank = 0, world_size = 1, device = 0;
  uintptr_t stream = 0;
  GridPlace place;
  py::object comm, tensor, pipeline, data, recovered;
  // For `local` (the replay of steps): whose data the step uses, whether it is a peer's step
  // replayed here, and the gradient buffer(s) the function names for the replay's digest.
  int data_rank = 0;
  bool replaying = false;
  py::object gradients = py::none();
  bool nonfinite = false;  // local sets it: its loss or gradients are not finite
};

// A communicator of the step as a Python Communicator, valid while `valid` holds.
py::object Borrow(Communicator* c, const Valid& valid);

// Runs a Python callable from rt-ft's side (CallPython): its exception is kept in `pending`
// unless it is an AbortedError, from which the protector recovers.
template <typename F>
Status CallBack(const std::shared_ptr<Pending>& pending, const std::string& what, F&& call) {
  return CallPython(pending, what, std::forward<F>(call), /*keep_aborted=*/false);
}

// `fn` as a step function called with the GIL and a fresh StepContext (None: no function);
// `names_gradients` for `local`: the buffer it names in ctx.gradients becomes the context's
// gradients, held until its next call.
StepFn WrapStep(py::object fn, const std::string& what, std::shared_ptr<Pending> pending,
                bool names_gradients = false);

// The StepContext class.
void BindStepContext(py::module_& m);

}  // namespace rtft::python
