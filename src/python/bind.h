// The parts of the module rtft._core, each bound by its own file; module.cc calls them in order.
#pragma once

#include <pybind11/pybind11.h>

namespace rtft::python {

void BindErrors(pybind11::module_& m);      // errors.cc
void BindState(pybind11::module_& m);       // state.cc
void BindCheckpoint(pybind11::module_& m);  // checkpoint.cc
void BindComm(pybind11::module_& m);        // comm.cc
void BindRuntime(pybind11::module_& m);     // runtime.cc
void BindProtect(pybind11::module_& m);     // protect.cc

}  // namespace rtft::python
