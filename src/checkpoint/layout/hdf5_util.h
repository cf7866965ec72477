// Small helpers around the HDF5 C API: an owning handle, HDF5 types for rt-ft dtypes (the 16-bit
// floats are spelled out bit by bit, since HDF5 1.10 has no predefined half or bfloat16), and
// turning HDF5's error stack into a Status.
#pragma once

#include <hdf5.h>

#include <string>

#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Handle() { Reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      Reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports failure (a file close is where HDF5 flushes metadata).
  herr_t Close() {
    herr_t r = 0;
    if (id_ >= 0) r = closer_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }
  void Reset() { (void)Close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Silences HDF5's automatic error printing in this process (rt-ft reports errors as Status).
void SilenceHdf5Errors();
// The innermost message of HDF5's current error stack, prefixed with `what`.
Status Hdf5Error(StatusCode code, const std::string& what);
// The HDF5 file type of a dtype (little-endian); the caller owns the returned handle.
H5Handle Hdf5FileType(DType dtype);
// The layout properties of every file access: 4 KiB alignment for large objects, metadata in
// large blocks. The driver is set on top of them (hdf5_driver.h).
H5Handle Hdf5FileAccess();

}  // namespace rtft
