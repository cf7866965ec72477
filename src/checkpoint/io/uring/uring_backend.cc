#include "checkpoint/io/uring/uring_backend.h"

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "checkpoint/io/fs_util.h"

namespace rtft {
namespace {

// An SQE's length is 32 bits; larger requests go in pieces, handled like partial completions.
constexpr size_t kMaxTransfer = size_t{1} << 30;
// IORING_MAX_ENTRIES in the kernel.
constexpr int kMaxQueueDepth = 32768;

// One request's progress: a partial completion advances it and sends it again.
struct Segment {
  uint64_t offset;
  char* buffer;
  size_t remaining;
  uint64_t start;
  size_t length;
};

class UringFile final : public FdFile {
 public:
  static StatusOr<std::unique_ptr<File>> Create(const std::string& path, OpenedFd opened,
                                                int queue_depth) {
    std::unique_ptr<UringFile> file(new UringFile(path, opened, queue_depth));
    int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth), &file->ring_, 0);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init for " + path);
    file->ring_ready_ = true;
    return std::unique_ptr<File>(std::move(file));
  }

  ~UringFile() override {
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  Status Write(const std::vector<IoRequest>& requests) override { return Transfer(requests, true); }
  Status Read(const std::vector<IoRequest>& requests) override { return Transfer(requests, false); }

 private:
  UringFile(const std::string& path, OpenedFd opened, int queue_depth)
      : FdFile(path, opened), depth_(static_cast<unsigned>(queue_depth)) {}

  std::string At(bool write, uint64_t offset) const {
    return std::string(write ? "io_uring write " : "io_uring read ") + path() + " at offset " +
           std::to_string(offset);
  }

  void Prepare(io_uring_sqe* sqe, Segment* s, bool write) {
    unsigned n = static_cast<unsigned>(std::min(s->remaining, kMaxTransfer));
    if (write) {
      io_uring_prep_write(sqe, fd(), s->buffer, n, s->offset);
    } else {
      io_uring_prep_read(sqe, fd(), s->buffer, n, s->offset);
    }
    io_uring_sqe_set_data(sqe, s);
  }

  // Applies one completion; a segment with bytes left goes back to `ready`.
  Status Complete(Segment* s, int res, bool write, std::vector<Segment*>* ready) {
    if (res == -EINTR || res == -EAGAIN) {
      ready->push_back(s);
      return Status::Ok();
    }
    if (res < 0) return Status::FromErrno(-res, At(write, s->offset));
    if (res == 0) {
      if (write) return Status::IoError(At(write, s->offset) + ": wrote 0 bytes");
      return TruncatedRead("io_uring read", path(), s->start, s->length, s->length - s->remaining);
    }
    s->offset += static_cast<uint64_t>(res);
    s->buffer += res;
    s->remaining -= static_cast<size_t>(res);
    if (s->remaining > 0) ready->push_back(s);
    return Status::Ok();
  }

  // Keeps up to depth_ segments in flight until all are done. After the first error no new
  // segment is submitted, but those in flight are reaped before returning: the kernel may still
  // be using the caller's buffers.
  Status Transfer(const std::vector<IoRequest>& requests, bool write) {
    RTFT_RETURN_IF_ERROR(CheckRequests(requests));
    if (!broken_.ok()) return broken_;
    std::vector<Segment> segments;
    segments.reserve(requests.size());
    for (const IoRequest& r : requests) {
      if (r.length == 0) continue;
      segments.push_back({r.offset, static_cast<char*>(r.buffer), r.length, r.offset, r.length});
    }
    std::vector<Segment*> ready;
    for (auto it = segments.rbegin(); it != segments.rend(); ++it) ready.push_back(&*it);

    unsigned in_flight = 0;
    Status first_error;
    for (;;) {
      while (first_error.ok() && !ready.empty() && in_flight < depth_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
        Prepare(sqe, ready.back(), write);
        ready.pop_back();
        ++in_flight;
      }
      if (in_flight == 0) break;
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR) {
        // Cannot tell which requests the kernel took; this ring is not used again.
        broken_ = Status::FromErrno(-rc, "io_uring_submit for " + path());
        return broken_;
      }
      unsigned head;
      unsigned seen = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        --in_flight;
        auto* s = static_cast<Segment*>(io_uring_cqe_get_data(cqe));
        Status status = Complete(s, cqe->res, write, &ready);
        if (!status.ok() && first_error.ok()) first_error = std::move(status);
      }
      io_uring_cq_advance(&ring_, seen);
    }
    return first_error;
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  unsigned depth_;
  Status broken_;
};

class UringBackend final : public LocalFsBackend {
 public:
  explicit UringBackend(int queue_depth) : queue_depth_(queue_depth) {}

  const char* name() const override { return "uring"; }

  StatusOr<std::unique_ptr<File>> Open(const std::string& path,
                                       const OpenOptions& options) override {
    RTFT_ASSIGN_OR_RETURN(OpenedFd opened, OpenFd(path, options));
    // On failure the half-built file closes the descriptor.
    return UringFile::Create(path, opened, queue_depth_);
  }

  StatusOr<std::unique_ptr<File>> Reopen(File& file, const OpenOptions& options) override {
    RTFT_ASSIGN_OR_RETURN(OpenedFd opened, ReopenFd(file, options));
    return UringFile::Create(file.path(), opened, queue_depth_);
  }

 private:
  int queue_depth_;
};

}  // namespace

Status ProbeUring() {
  // Never destroyed: a writer thread may probe while the process exits.
  static const Status& probe = *new Status([] {
    io_uring ring;
    int rc = io_uring_queue_init(2, &ring, 0);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init");
    io_uring_queue_exit(&ring);
    return Status::Ok();
  }());
  return probe;
}

StatusOr<std::unique_ptr<IoBackend>> CreateUringBackend(const IoBackendOptions& options) {
  if (options.queue_depth < 1 || options.queue_depth > kMaxQueueDepth) {
    return Status::InvalidArgument("io_uring queue depth " + std::to_string(options.queue_depth) +
                                   " is outside 1.." + std::to_string(kMaxQueueDepth));
  }
  Status probe = ProbeUring();
  if (!probe.ok()) {
    return Status::Unimplemented("io_uring is not usable in this process: " + probe.message());
  }
  return std::unique_ptr<IoBackend>(new UringBackend(options.queue_depth));
}

}  // namespace rtft
