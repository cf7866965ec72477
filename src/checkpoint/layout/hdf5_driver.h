// An HDF5 virtual file driver over an rt-ft File (io/io_backend.h). With it HDF5's own reads and
// writes of a checkpoint file (superblock, object headers, attributes, the objects, the manifest)
// go through the same I/O backend as the engine's tensor bytes: the fault-injecting backend
// reaches them, and a reader opens each file once, as a checked regular file, and HDF5 reads
// through that descriptor only. (HDF5 1.10's core driver would hold the whole file in memory.)
// Used by layout.cc only.
#pragma once

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/hdf5_util.h"
#include "rtft/status.h"

namespace rtft {

// What one HDF5 file id reads and writes through. It must outlive every HDF5 id opened with the
// file access properties made from it.
struct Hdf5DriverState {
  File* file = nullptr;  // not owned
  // The first failed write, truncate or read. HDF5 1.10 keeps the id of a file whose close failed
  // pointing at freed memory and closes it again at exit (a crash), so the driver never lets a
  // write fail inside HDF5: it records the error here and reports success, and layout.cc checks
  // `error` after every step and never renames such a file into place.
  Status error;
};

// The file access properties rt-ft uses (Hdf5FileAccess in hdf5_util.h) with this driver.
H5Handle Hdf5FileAccessOver(Hdf5DriverState* state);

}  // namespace rtft
