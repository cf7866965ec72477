// What every file of the Python module shares: Status errors on their way to Python exceptions,
// references to Python objects that any thread may drop, and the conversion of a Python exception
// raised in a callback into a Status that rt-ft's C++ code can return. The module binds librt-ft's
// public API only (include/rtft/); docs/python.md describes it.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "rtft/status.h"

namespace rtft::python {

namespace py = pybind11;

// A Status that is not OK, thrown by the binding and raised in Python as the rtft.errors class of
// its code (errors.cc).
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string what_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(StatusOr<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Sets the Python error for `status` (the rtft.errors class of its code).
void RaiseStatus(const Status& status);

// False once the interpreter is finalizing (or rtft's atexit hook ran): callbacks from rt-ft's
// threads then do nothing rather than take a GIL that may never come back.
bool PythonAlive();
void MarkPythonExiting();
// The interpreter is initialized and not finalizing: a reference may still be released.
bool InterpreterRunning();

// A strong reference to a Python object that a std::function may hold and any thread may drop:
// the last owner takes the GIL to release it (or leaks it when the interpreter is gone).
class PyOwned {
 public:
  explicit PyOwned(py::object object) : object_(object.release().ptr()) {}
  ~PyOwned();
  PyOwned(const PyOwned&) = delete;
  PyOwned& operator=(const PyOwned&) = delete;
  // Borrowed; call with the GIL held.
  py::handle get() const { return object_; }

 private:
  PyObject* object_;
};
using PyHandle = std::shared_ptr<PyOwned>;
inline PyHandle Hold(py::object object) { return std::make_shared<PyOwned>(std::move(object)); }

// The exception being handled as a Python object (with its traceback attached), taken out of
// `error`; call with the GIL held.
py::object TakeException(py::error_already_set& error);
// The Status for a Python exception raised in a callback named `what`: an rtft.errors.Error keeps
// its code (an AbortedError from a collective stays kAborted, so that a step recovers), anything
// else is kInternal with the exception's type and text. Call with the GIL held.
Status StatusFromException(py::handle exception, const std::string& what);

// Runs `call` (a Python callback of rt-ft's: a step function, a serializer, ...) with the GIL; an
// exception becomes the Status of StatusFromException and, when it is the first since
// `slot->exception` was emptied, is kept there for the call that failed to raise again. An
// AbortedError is kept too unless `keep_aborted` is false (a step's abort is recovered from, not
// raised).
template <typename Slot, typename F>
Status CallPython(const std::shared_ptr<Slot>& slot, const std::string& what, F&& call,
                  bool keep_aborted = true) {
  if (!PythonAlive()) return Status::FailedPrecondition(what + ": Python is exiting");
  py::gil_scoped_acquire gil;
  try {
    return call();
  } catch (py::error_already_set& e) {
    py::object exc = TakeException(e);
    Status status = StatusFromException(exc, what);
    if ((keep_aborted || status.code() != StatusCode::kAborted) && !slot->exception)
      slot->exception = Hold(exc);
    return status;
  } catch (const StatusError& e) {
    return e.status().Annotate(what);
  } catch (const std::exception& e) {
    return Status::Internal(what + ": " + e.what());
  }
}

// Seconds from Python (None: the default) as a timeout in milliseconds; negative is refused.
std::optional<std::chrono::milliseconds> Timeout(const std::optional<double>& seconds,
                                                 const char* what);

}  // namespace rtft::python
