// rtft._core: the compiled half of the Python package rtft (src/python/rtft/ is the other half).
// It binds librt-ft's public API (include/rtft/) for PyTorch users: tensors arrive through
// DLPack, without a copy and without linking any torch library; every call that can block
// releases the GIL; callbacks from rt-ft take it again (docs/python.md).
#include <pybind11/pybind11.h>

#include "python/bind.h"
#include "rtft/testing.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "rt-ft's C++ API for Python (use the package rtft, not this module)";
  rtft::python::BindErrors(m);
  rtft::python::BindState(m);
  rtft::python::BindCheckpoint(m);
  rtft::python::BindComm(m);
  rtft::python::BindRuntime(m);
  rtft::python::BindProtect(m);
  m.def(
      "fault_point", [](const std::string& point) { rtft::FaultPoint(point.c_str()); },
      pybind11::arg("point"), pybind11::call_guard<pybind11::gil_scoped_release>(),
      "A named fault point of the application's own (include/rtft/testing.h): RTFT_FAULT makes "
      "the process fail here, for tests");
  m.def(
      "fault_flag", [](const std::string& point) { return rtft::FaultFlag(point.c_str()); },
      pybind11::arg("point"),
      "True where RTFT_FAULT arms `point` with flag (once) or flags (from then on): the "
      "application corrupts its own data there, for tests (include/rtft/testing.h)");
  m.def(
      "arm_faults", [](const std::string& spec) { rtft::ArmFaults(spec.c_str()); },
      pybind11::arg("spec"), "Arms fault points as RTFT_FAULT would (empty: disarms them)");
}
