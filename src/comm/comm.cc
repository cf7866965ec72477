// The public face of the comm layer: names, option checks, the explicit list of backends, and
// the one factory that picks among them.
#include <algorithm>
#include <limits>

#include "comm/comm_internal.h"
#include "comm/watch.h"
#include "core/build_config.h"
#include "core/params.h"

namespace rtft {

const char* CommBackendName(CommBackend backend) {
  switch (backend) {
    case CommBackend::kGloo:
      return "gloo";
    case CommBackend::kNccl:
      return "nccl";
  }
  return "?";
}

bool ParseCommBackend(const std::string& name, CommBackend* backend) {
  if (name == "gloo") {
    *backend = CommBackend::kGloo;
  } else if (name == "nccl") {
    *backend = CommBackend::kNccl;
  } else {
    return false;
  }
  return true;
}

bool CommBackendAvailable(CommBackend backend) {
  switch (backend) {
    case CommBackend::kGloo:
      return RTFT_WITH_GLOO;
    case CommBackend::kNccl:
      return RTFT_WITH_NCCL;
  }
  return false;
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

CommStore::~CommStore() = default;
AbortRegistry::~AbortRegistry() = default;
Communicator::~Communicator() = default;

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const CommOptions& options) {
  RTFT_ASSIGN_OR_RETURN(comm::ResolvedOptions resolved, comm::ResolveOptions(options));
  if (!CommBackendAvailable(options.backend))
    return Status::Unimplemented(
        std::string("communicator backend '") + CommBackendName(options.backend) +
        "' is not in this build of rt-ft (RTFT_WITH_GLOO / RTFT_WITH_NCCL)");
  if (options.aborts != nullptr && options.aborts->epoch() > options.epoch)
    return Status::Aborted("communicator '" + options.name + "' of epoch " +
                           std::to_string(options.epoch) + " is stale: the job is at epoch " +
                           std::to_string(options.aborts->epoch()));
  switch (options.backend) {
    case CommBackend::kGloo: {
      RTFT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c,
                            comm::CreateGlooCommunicator(resolved));
      if (!options.job_ranks.empty()) comm::WatchCalls(c.get(), options.job_ranks);
      return c;
    }
    case CommBackend::kNccl:
      return comm::CreateNcclCommunicator(resolved);
  }
  return Status::InvalidArgument("unknown communicator backend");
}

namespace comm {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

StatusOr<milliseconds> TimeoutParam(Param param, milliseconds given) {
  if (given.count() < 0) return Status::InvalidArgument("a communicator timeout is negative");
  if (given.count() > 0) return given;
  RTFT_ASSIGN_OR_RETURN(int64_t ms, ParamInt(param));
  if (ms <= 0)
    return Status::InvalidArgument(std::string(GetParamInfo(param).env) + "=" + std::to_string(ms) +
                                   ": must be positive");
  return milliseconds(ms);
}

// About 30 years: far enough to mean "no deadline", near enough that now() + it never overflows.
constexpr milliseconds kFarFuture{30LL * 365 * 24 * 3600 * 1000};

}  // namespace

StatusOr<ResolvedOptions> ResolveOptions(const CommOptions& options) {
  ResolvedOptions r;
  r.o = options;
  if (options.world_size < 1)
    return Status::InvalidArgument("communicator world size " + std::to_string(options.world_size) +
                                   ": must be at least 1");
  if (options.rank < 0 || options.rank >= options.world_size)
    return Status::InvalidArgument("communicator rank " + std::to_string(options.rank) +
                                   " is outside 0.." + std::to_string(options.world_size - 1));
  if (!ValidName(options.name))
    return Status::InvalidArgument("communicator name '" + options.name +
                                   "': use 1 to 64 of A-Z a-z 0-9 _ . -");
  if (options.world_size > 1 && options.store == nullptr)
    return Status::InvalidArgument("communicator '" + options.name +
                                   "' of several ranks needs a store to meet in");
  if (options.device < 0) return Status::InvalidArgument("negative CUDA device ordinal");
  if (!options.job_ranks.empty() &&
      options.job_ranks.size() != static_cast<size_t>(options.world_size))
    return Status::InvalidArgument(
        "communicator '" + options.name + "': " + std::to_string(options.job_ranks.size()) +
        " job ranks for a world of " + std::to_string(options.world_size));
  for (const int r : options.job_ranks)
    if (r < 0)
      return Status::InvalidArgument("communicator '" + options.name + "': job rank " +
                                     std::to_string(r) + " is negative");
  RTFT_ASSIGN_OR_RETURN(r.create_timeout,
                        TimeoutParam(Param::kCommCreateTimeoutMs, options.create_timeout));
  RTFT_ASSIGN_OR_RETURN(r.timeout, TimeoutParam(Param::kCommTimeoutMs, options.timeout));
  r.create_deadline = DeadlineFrom(r.create_timeout, r.create_timeout);
  return r;
}

std::string CommKey(uint64_t epoch, const std::string& name, const std::string& what) {
  return "comm/e" + std::to_string(epoch) + "/" + name + "/" + what;
}

Clock::time_point DeadlineFrom(milliseconds timeout, milliseconds default_timeout) {
  milliseconds t = timeout.count() > 0 ? timeout : default_timeout;
  return Clock::now() + std::min(t, kFarFuture);
}

milliseconds Remaining(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return milliseconds(0);
  return std::chrono::ceil<milliseconds>(left);
}

StatusOr<size_t> CountBytes(size_t count, DType dtype, const char* what) {
  const size_t size = DTypeSize(dtype);
  if (size == 0) return Status::InvalidArgument(std::string(what) + ": unknown data type");
  if (count > std::numeric_limits<size_t>::max() / size)
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(count) +
                                   " elements overflow the byte count");
  return count * size;
}

std::string HexEncode(const void* data, size_t bytes) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string s(2 * bytes, '0');
  for (size_t i = 0; i < bytes; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

bool HexDecode(const std::string& hex, std::vector<char>* out) {
  if (hex.size() % 2 != 0) return false;
  out->resize(hex.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    (*out)[i] = static_cast<char>(v);
  }
  return true;
}

const char* OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kHello:
      return "hello";
    case OpKind::kAllReduce:
      return "all-reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllGather:
      return "all-gather";
    case OpKind::kReduceScatter:
      return "reduce-scatter";
    case OpKind::kSendRecv:
      return "send/recv";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kBye:
      return "bye";
  }
  return "?";
}

#if !RTFT_WITH_GLOO
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const ResolvedOptions&) {
  return Status::Unimplemented("this build has no Gloo backend (RTFT_WITH_GLOO=OFF)");
}
void WatchCalls(Communicator*, std::vector<int>) {}  // only a Gloo communicator is watched
#endif
#if !RTFT_WITH_NCCL
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const ResolvedOptions&) {
  return Status::Unimplemented("this build has no NCCL backend (RTFT_WITH_NCCL=OFF)");
}
#endif

}  // namespace comm
}  // namespace rtft
