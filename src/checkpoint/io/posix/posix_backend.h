// The posix I/O backend: one pwrite/pread per request, in order, on the calling thread. It is the
// fallback where io_uring is not built or not allowed, and the reference the others are tested
// against.
#pragma once

#include <memory>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft {

StatusOr<std::unique_ptr<IoBackend>> CreatePosixBackend(const IoBackendOptions& options);

}  // namespace rtft
