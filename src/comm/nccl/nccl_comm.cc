#include "comm/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include "core/cuda_status.h"
#include "core/host_env.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread.h"

namespace rtft::comm {

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const ResolvedOptions& options) {
  return nccl_backend::NcclComm::Create(options);
}

namespace nccl_backend {
namespace {

constexpr milliseconds kStoreSlice{50};

// How a poll loop waits between two looks: yielding (a few microseconds) for its first 2 ms, so a
// short collective is seen done at once, then sleeping 50 us, so a long one does not hold a core.
class Backoff {
 public:
  void Pause() {
    if (Clock::now() - start_ < milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  const Clock::time_point start_ = Clock::now();
};

// NCCL_ALGO and NCCL_PROTO are read once per process, by NCCL's first communicator: dp-launch
// exports Ring and Simple to the application before exec unless the user set them (the library
// never writes the environment). Checked once: other values warn (reductions may then differ in
// their last bits between runs), and fail under RTFT_COMM_NCCL_DETERMINISTIC=1 (docs/comm.md,
// "Deterministic results").
Status CheckAlgorithms() {
  // Never destroyed: a communicator may be made on a thread while the process exits.
  static const Status& checked = *new Status([] {
    auto strict = ParamBool(Param::kCommNcclDeterministic);
    if (!strict.ok()) return strict.status();
    const std::pair<const char*, const char*> pins[] = {{"NCCL_ALGO", "Ring"},
                                                        {"NCCL_PROTO", "Simple"}};
    std::string off;
    for (const auto& [name, value] : pins) {
      const std::string cur = NcclSetting(name);
      if (cur != value)
        off += std::string(off.empty() ? "" : ", ") + name + "=" + (cur.empty() ? "(unset)" : cur) +
               " (" + value + " expected)";
    }
    if (off.empty()) return Status::Ok();
    const std::string what = "NCCL: " + off +
                             ": reductions are not bitwise reproducible from run to run, so a "
                             "recovered run may not end identical (dp-launch sets both)";
    if (*strict) return Status::FailedPrecondition(what + " (RTFT_COMM_NCCL_DETERMINISTIC=1)");
    RTFT_LOG(kWarn, kLogComm) << what;
    return Status::Ok();
  }());
  return checked;
}

// Two NCCLs may sit on one machine (a system one and a Python environment's): the one actually
// loaded, its version and file, logged once per process (docs/comm.md, "NCCL").
void LogLoadedNccl() {
  static const bool logged = [] {
    int version = 0;
    const ncclResult_t rc = ncclGetVersion(&version);
    Dl_info info{};
    const bool found =
        dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) != 0 && info.dli_fname != nullptr;
    RTFT_LOG(kInfo, kLogComm) << "NCCL "
                              << (rc == ncclSuccess ? std::to_string(version / 10000) + "." +
                                                          std::to_string(version / 100 % 100) +
                                                          "." + std::to_string(version % 100)
                                                    : std::string("(version unknown)"))
                              << " from " << (found ? info.dli_fname : "(unknown file)");
    return true;
  }();
  (void)logged;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> NcclComm::Create(const ResolvedOptions& options) {
  std::unique_ptr<NcclComm> c(new NcclComm(options));
  if (options.o.aborts != nullptr) {
    NcclComm* self = c.get();
    c->abort_token_ = options.o.aborts->Subscribe(options.o.epoch, [self] {
      self->Abort("a failure event ended epoch " + std::to_string(self->epoch()));
    });
    c->subscribed_ = true;
  }
  const Status s = c->Init();
  if (!s.ok())
    return s.Annotate("creating NCCL communicator '" + options.o.name + "' of epoch " +
                      std::to_string(options.o.epoch));
  return std::unique_ptr<Communicator>(std::move(c));
}

StatusOr<std::string> NcclComm::UniqueId() {
  const std::string key = CommKey(opts_.o.epoch, opts_.o.name, "nccl-id");
  if (opts_.o.rank == 0) {
    ncclUniqueId id;
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) return Fail("ncclGetUniqueId", rc);
    std::string hex = HexEncode(id.internal, sizeof(id.internal));
    if (opts_.o.world_size > 1) RTFT_RETURN_IF_ERROR(opts_.o.store->Put(key, hex));
    return std::string(id.internal, sizeof(id.internal));
  }
  while (true) {
    if (aborted_) return Usable();
    const auto slice = std::min(opts_.create_deadline, Clock::now() + kStoreSlice);
    auto v = opts_.o.store->Get(key, slice);
    if (v.ok()) {
      std::vector<char> id;
      if (!HexDecode(*v, &id) || id.size() != sizeof(ncclUniqueId::internal))
        return Status::DataLoss("rank 0 published a malformed NCCL unique id");
      return std::string(id.begin(), id.end());
    }
    if (v.status().code() != StatusCode::kDeadlineExceeded) return v.status();
    if (Clock::now() >= opts_.create_deadline)
      return Status::DeadlineExceeded("rank 0 did not publish the NCCL unique id within " +
                                      std::to_string(opts_.create_timeout.count()) +
                                      " ms (RTFT_COMM_CREATE_TIMEOUT_MS)");
  }
}

Status NcclComm::Init() {
  RTFT_RETURN_IF_ERROR(CheckAlgorithms());
  LogLoadedNccl();
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(opts_.o.device),
                                  "selecting CUDA device " + std::to_string(opts_.o.device)));
  RTFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&barrier_word_, sizeof(int32_t)), "cudaMalloc"));
  RTFT_ASSIGN_OR_RETURN(std::string id_bytes, UniqueId());
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    std::lock_guard<std::mutex> lock(h_->mu);
    if (aborted_) return Usable();
    const ncclResult_t rc =
        ncclCommInitRankConfig(&h_->comm, opts_.o.world_size, id, opts_.o.rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      h_->comm = nullptr;
      return Fail("ncclCommInitRankConfig", rc);
    }
  }
  return Settle("ncclCommInitRankConfig", opts_.create_deadline);
}

Status NcclComm::Settle(const char* what, Clock::time_point deadline) {
  Backoff backoff;
  while (true) {
    if (aborted_) return Usable();
    {
      std::unique_lock<std::mutex> lock(h_->mu, std::try_to_lock);
      if (lock.owns_lock()) {
        if (h_->comm == nullptr) return Usable();
        ncclResult_t state = ncclSuccess;
        const ncclResult_t rc = ncclCommGetAsyncError(h_->comm, &state);
        if (rc != ncclSuccess) {
          lock.unlock();
          return Fail("ncclCommGetAsyncError", rc);
        }
        if (state == ncclSuccess) return Status::Ok();
        if (state != ncclInProgress) {
          lock.unlock();
          return Fail(what, state);
        }
      }
    }
    if (Clock::now() >= deadline) {
      Abort(std::string(what) + " did not finish before its deadline");
      return Status::DeadlineExceeded(std::string(what) + " did not finish before its deadline");
    }
    backoff.Pause();
  }
}

Status NcclComm::Enqueue(const char* what, const CallOptions& call,
                         const std::function<ncclResult_t(ncclComm_t)>& enqueue) {
  RTFT_RETURN_IF_ERROR(Usable());
  const Clock::time_point deadline = DeadlineFrom(call.timeout, opts_.timeout);
  ncclResult_t rc = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(h_->mu);
    if (h_->comm == nullptr || aborted_) return Usable();
    rc = enqueue(h_->comm);
  }
  if (rc != ncclSuccess && rc != ncclInProgress) return Fail(what, rc);
  // Work a non-blocking communicator has not taken yet (ncclInProgress) must be taken before the
  // next call on it.
  return Settle(what, deadline);
}

Status NcclComm::Usable() const {
  if (!aborted_) return Status::Ok();
  std::lock_guard<std::mutex> lock(state_mu_);
  return Status::Aborted("NCCL communicator '" + opts_.o.name + "' of epoch " +
                         std::to_string(opts_.o.epoch) + " aborted: " + abort_reason_);
}

// An NCCL error aborts the communicator. What the caller does next follows from its cause: a bad
// call is the caller's to fix; a CUDA error under NCCL that is sticky means the GPU is gone
// (kDeviceLost, core/cuda_status.h: retire the slot, not rebuild the communicator); anything
// else (a peer gone, the network) is kAborted: the next epoch's communicator.
Status NcclComm::Fail(const std::string& what, ncclResult_t rc) {
  const std::string why = what + ": " + ncclGetErrorString(rc);
  Abort(why);
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) return Status::InvalidArgument(why);
  if (rc == ncclUnhandledCudaError) {
    const cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess && IsStickyCudaError(static_cast<int>(e))) return CudaStatus(e, why);
  }
  return Status::Aborted(why);
}

void NcclComm::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (aborted_) return;
    abort_reason_ = reason;
    aborted_ = true;
    // ncclCommAbort waits for the communicator's threads (about half a second with a dead
    // peer): never on the caller's thread, and the communicator's destructor does not wait for
    // it either. The thread lingers until it ends, or until rtft::Shutdown() joins it.
    auto abort = [h = h_] {
      std::lock_guard<std::mutex> nccl(h->mu);
      if (h->comm != nullptr) {
        const ncclResult_t rc = ncclCommAbort(h->comm);
        if (rc != ncclSuccess)
          RTFT_LOG(kWarn, kLogComm) << "ncclCommAbort: " << ncclGetErrorString(rc);
        h->comm = nullptr;
      }
    };
    auto thread = Thread::Start("rtft-nccl-abort", abort);
    if (thread.ok()) {
      Linger(std::move(*thread));
    } else {
      RTFT_LOG(kWarn, kLogComm) << thread.status() << ": aborting on the caller's thread";
      abort();
    }
  }
  RTFT_LOG(kInfo, kLogComm) << "NCCL communicator '" << name() << "' of epoch " << epoch()
                            << " aborted: " << reason;
}

NcclComm::~NcclComm() {
  if (subscribed_) opts_.o.aborts->Unsubscribe(abort_token_);
  bool healthy;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    healthy = !aborted_;
  }
  if (healthy) {
    // Flush, then free. A peer that died meanwhile turns the flush into an abort at the deadline.
    std::unique_lock<std::mutex> nccl(h_->mu);
    if (h_->comm != nullptr) {
      ncclResult_t rc = ncclCommFinalize(h_->comm);
      const auto deadline = Clock::now() + opts_.timeout;
      Backoff backoff;
      while (rc == ncclSuccess || rc == ncclInProgress) {
        ncclResult_t state = ncclSuccess;
        rc = ncclCommGetAsyncError(h_->comm, &state);
        if (rc != ncclSuccess) break;
        if (state != ncclInProgress) {
          rc = state;
          break;
        }
        if (Clock::now() >= deadline) {
          rc = ncclInternalError;
          break;
        }
        nccl.unlock();
        backoff.Pause();
        nccl.lock();
      }
      if (rc == ncclSuccess) {
        ncclCommDestroy(h_->comm);
      } else {
        ncclCommAbort(h_->comm);
      }
      h_->comm = nullptr;
    }
  }
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
}

Status NcclComm::Wait(void* stream, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = DeadlineFrom(timeout, opts_.timeout);
  auto s = static_cast<cudaStream_t>(stream);
  Backoff backoff;
  while (true) {
    RTFT_RETURN_IF_ERROR(Usable());
    {
      std::unique_lock<std::mutex> lock(h_->mu, std::try_to_lock);
      if (lock.owns_lock() && h_->comm != nullptr) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t rc = ncclCommGetAsyncError(h_->comm, &state);
        if (rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
          lock.unlock();
          return Fail("a collective failed", rc != ncclSuccess ? rc : state);
        }
      }
    }
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return Usable();
    if (q != cudaErrorNotReady) {
      Abort(std::string("the stream failed: ") + cudaGetErrorName(q));
      return CudaStatus(q, "waiting for the stream");
    }
    if (Clock::now() >= deadline) {
      Abort("Wait passed its deadline");
      return Status::DeadlineExceeded(
          "the stream's collectives did not complete in time "
          "(RTFT_COMM_TIMEOUT_MS); the communicator is aborted");
    }
    backoff.Pause();
  }
}

}  // namespace nccl_backend
}  // namespace rtft::comm
