// The io_uring I/O backend: each File owns one ring and keeps up to queue_depth requests in
// flight, so one flush thread can saturate an NVMe device with O_DIRECT writes. Built only with
// RTFT_WITH_URING; CreateIoBackend is the only caller. No liburing type leaves this folder.
#pragma once

#include <memory>

#include "checkpoint/io/io_backend.h"
#include "rtft/status.h"

namespace rtft {

// OK when this process may create an io_uring (kernels and containers may forbid it).
Status ProbeUring();

StatusOr<std::unique_ptr<IoBackend>> CreateUringBackend(const IoBackendOptions& options);

}  // namespace rtft
