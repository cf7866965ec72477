// rtft._core.Runtime's object: owns the rtft::Runtime that communicators and protectors made from
// it use (they keep the Python object alive). Its destructor releases the GIL, since the
// runtime's thread may be waiting for it to run a listener.
#pragma once

#include <memory>
#include <optional>

#include "python/py_common.h"
#include "rtft/runtime.h"

namespace rtft::python {

class PyRuntime {
 public:
  PyRuntime(std::optional<double> standby_timeout, double connect_timeout);
  ~PyRuntime();
  Runtime* get() const { return rt_.get(); }

 private:
  std::unique_ptr<Runtime> rt_;
};

}  // namespace rtft::python
