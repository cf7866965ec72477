// rtft._core.Communicator: a communicator of include/rtft/comm.h for Python, owned (made by
// Runtime.create_communicator or Communicator.create) or borrowed (a step's ctx.comm, valid until
// the step function returns). Buffers are tensors through DLPack, checked against the call (dtype,
// element counts, memory kind) before anything is sent; every call releases the GIL.
#pragma once

#include <atomic>
#include <memory>

#include "python/py_common.h"
#include "rtft/comm.h"

namespace rtft::python {

class PyComm {
 public:
  explicit PyComm(std::unique_ptr<Communicator> owned)
      : owned_(std::move(owned)), comm_(owned_.get()) {}
  // Valid while *valid is true: the owner clears it before the communicator goes.
  PyComm(Communicator* borrowed, std::shared_ptr<std::atomic<bool>> valid)
      : comm_(borrowed), valid_(std::move(valid)) {}
  ~PyComm();

  // The communicator, or FAILED_PRECONDITION for a borrowed one whose step or epoch is over.
  Communicator* get() const;
  void Close();

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* comm_ = nullptr;
  std::shared_ptr<std::atomic<bool>> valid_;
};

}  // namespace rtft::python
