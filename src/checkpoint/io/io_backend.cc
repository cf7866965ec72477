// CreateIoBackend: the one list of compiled-in I/O backends. The fault backend is not in it: it
// wraps one of these (CreateFaultBackend) and is chosen by tests and tools, not by `kind`.
#include "checkpoint/io/io_backend.h"
#include "core/build_config.h"

#include "checkpoint/io/posix/posix_backend.h"
#include "core/logging.h"
#if RTFT_WITH_URING
#include "checkpoint/io/uring/uring_backend.h"
#endif

namespace rtft {
namespace {

StatusOr<std::unique_ptr<IoBackend>> CreateUring(const IoBackendOptions& options) {
#if RTFT_WITH_URING
  return CreateUringBackend(options);
#else
  return Status::Unimplemented(
      "I/O backend 'uring': this build has no io_uring (RTFT_WITH_URING=OFF)");
#endif
}

// Whether `auto` may pick io_uring; the probe behind it runs once per process.
Status UringUsable() {
#if RTFT_WITH_URING
  return ProbeUring();
#else
  return Status::Unimplemented("built without io_uring");
#endif
}

}  // namespace

StatusOr<std::unique_ptr<IoBackend>> CreateIoBackend(const IoBackendOptions& options) {
  if (options.kind == "posix") return CreatePosixBackend(options);
  if (options.kind == "uring") return CreateUring(options);
  if (options.kind != "auto") {
    return Status::InvalidArgument("unknown I/O backend '" + options.kind +
                                   "' (use auto, uring or posix)");
  }
  Status uring = UringUsable();
  if (uring.ok()) {
    auto backend = CreateUring(options);
    if (backend.ok()) {
      RTFT_LOG(kInfo, kLogIo) << "I/O backend: uring (auto)";
    }
    return backend;
  }
  RTFT_LOG(kInfo, kLogIo) << "I/O backend: posix (auto; io_uring unavailable: " << uring.message()
                          << ")";
  return CreatePosixBackend(options);
}

}  // namespace rtft
