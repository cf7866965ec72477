// CreateIoBackend: the one list of compiled-in I/O backends. The fault backend is not in it: it
// wraps one of these (CreateFaultBackend) and is chosen by tests and tools, not by `kind`.
#include "checkpoint/io/io_backend.h"
#include "core/build_config.h"

#include <algorithm>

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

void MergeAdjacent(std::vector<IoRequest>* requests) {
  if (requests->size() < 2) return;
  size_t out = 0;
  for (size_t i = 1; i < requests->size(); ++i) {
    IoRequest& last = (*requests)[out];
    const IoRequest& next = (*requests)[i];
    if (last.offset + last.length == next.offset &&
        static_cast<char*>(last.buffer) + last.length == next.buffer) {
      last.length += next.length;
    } else {
      (*requests)[++out] = next;
    }
  }
  requests->resize(out + 1);
}

void SplitLarge(std::vector<IoRequest>* requests, uint64_t max_bytes) {
  std::vector<IoRequest> out;
  for (const IoRequest& r : *requests) {
    for (uint64_t done = 0; done < r.length; done += max_bytes) {
      out.push_back(IoRequest{r.offset + done, static_cast<char*>(r.buffer) + done,
                              std::min<uint64_t>(max_bytes, r.length - done)});
    }
  }
  requests->swap(out);
}

}  // namespace rtft
