// Status codes and errors between rt-ft and Python: the StatusCode enum, the translation of a
// StatusError into the rtft.errors class of its code, and back, for exceptions raised in callbacks.
#include <cmath>
#include <string>

#include "python/bind.h"
#include "python/py_common.h"

namespace rtft::python {

namespace {

std::atomic<bool> python_exiting{false};

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

bool InterpreterRunning() { return Py_IsInitialized() && !Finalizing(); }
bool PythonAlive() { return !python_exiting.load() && InterpreterRunning(); }
void MarkPythonExiting() { python_exiting = true; }

PyOwned::~PyOwned() {
  if (object_ == nullptr || !InterpreterRunning()) return;  // leaked at exit
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(object_);
  PyGILState_Release(gil);
}

void RaiseStatus(const Status& status) {
  try {
    py::module_ errors = py::module_::import("rtft.errors");
    py::object cls = errors.attr("error_class")(static_cast<int>(status.code()));
    py::object exc = cls(status.message(), status.code());
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (py::error_already_set&) {
    // rtft.errors could not be imported (the module loaded on its own): a plain RuntimeError.
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, status.ToString().c_str());
  }
}

py::object TakeException(py::error_already_set& error) {
  error.restore();
#if PY_VERSION_HEX >= 0x030C0000
  return py::reinterpret_steal<py::object>(PyErr_GetRaisedException());
#else
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  if (trace != nullptr && value != nullptr) PyException_SetTraceback(value, trace);
  Py_XDECREF(type);
  Py_XDECREF(trace);
  return py::reinterpret_steal<py::object>(value);
#endif
}

Status StatusFromException(py::handle exception, const std::string& what) {
  std::string text = "?";
  try {
    text = py::str(exception).cast<std::string>();
    py::object base = py::module_::import("rtft.errors").attr("Error");
    if (PyObject_IsInstance(exception.ptr(), base.ptr()) == 1) {
      const int code = exception.attr("code").cast<int>();
      const std::string message = exception.attr("message").cast<std::string>();
      if (code > 0 && code <= static_cast<int>(kLastStatusCode))
        return Status(static_cast<StatusCode>(code), what + ": " + message);
    }
    text = py::str(exception.get_type().attr("__name__")).cast<std::string>() + ": " + text;
  } catch (py::error_already_set&) {
    PyErr_Clear();
  }
  return Status::Internal(what + " raised " + text);
}

std::optional<std::chrono::milliseconds> Timeout(const std::optional<double>& seconds,
                                                 const char* what) {
  if (!seconds) return std::nullopt;
  if (!std::isfinite(*seconds) || *seconds < 0 || *seconds > 1e9)
    throw StatusError(
        Status::InvalidArgument(std::string(what) + ": a timeout is 0 to 1e9 seconds, or None"));
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

void BindErrors(py::module_& m) {
  py::enum_<StatusCode>(m, "StatusCode", "rt-ft's status codes (include/rtft/status.h)")
      .value("OK", StatusCode::kOk)
      .value("INVALID_ARGUMENT", StatusCode::kInvalidArgument)
      .value("NOT_FOUND", StatusCode::kNotFound)
      .value("ALREADY_EXISTS", StatusCode::kAlreadyExists)
      .value("FAILED_PRECONDITION", StatusCode::kFailedPrecondition)
      .value("OUT_OF_RANGE", StatusCode::kOutOfRange)
      .value("RESOURCE_EXHAUSTED", StatusCode::kResourceExhausted)
      .value("PERMISSION_DENIED", StatusCode::kPermissionDenied)
      .value("DEADLINE_EXCEEDED", StatusCode::kDeadlineExceeded)
      .value("UNAVAILABLE", StatusCode::kUnavailable)
      .value("ABORTED", StatusCode::kAborted)
      .value("DATA_LOSS", StatusCode::kDataLoss)
      .value("IO_ERROR", StatusCode::kIoError)
      .value("UNIMPLEMENTED", StatusCode::kUnimplemented)
      .value("INTERNAL", StatusCode::kInternal)
      .value("DEVICE_LOST", StatusCode::kDeviceLost)
      .value("SHUTDOWN", StatusCode::kShutdown);
  m.attr("LAST_STATUS_CODE") = static_cast<int>(kLastStatusCode);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
  m.def("_at_exit", &MarkPythonExiting,
        "Called by rtft's atexit hook: callbacks from rt-ft's threads stop calling Python.");
  // For the tests of the translation: raises the error of `code` with `message`.
  m.def("_raise_status", [](int code, const std::string& message) {
    if (code <= 0 || code > static_cast<int>(kLastStatusCode))
      throw py::value_error("no such status code");
    throw StatusError(Status(static_cast<StatusCode>(code), message));
  });
}

}  // namespace rtft::python
