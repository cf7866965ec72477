#include "bench/comm/comm_direct.h"
#include "core/build_config.h"

#include <unistd.h>

#include <sys/time.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#if RTFT_WITH_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif
#if RTFT_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include "core/fault_point.h"
#include "core/params.h"

namespace rtft::bench {
namespace {

using std::chrono::milliseconds;

#if RTFT_WITH_GLOO
// gloo's rendezvous store over rt-ft's (the job's key-value store).
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(CommStore* store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = store_->Put(prefix_ + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(prefix_ + key, CommClock::now() + milliseconds(60000));
    if (!v.ok()) throw std::runtime_error(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) (void)get(k);
  }

 private:
  CommStore* store_;
  std::string prefix_;
};

class GlooDirect final : public DirectAllReduce {
 public:
  Status Init(int rank, int world, CommStore* store, const std::string& prefix) {
    try {
      gloo::transport::tcp::attr attr;
      const std::string host = ParamString(Param::kCommGlooHost);
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      attr.hostname = host.empty() ? std::string(name) : host;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, world);
      context_->setTimeout(milliseconds(300000));
      GlooStore gstore(store, prefix);
      context_->connectFullMesh(gstore, device_);
    } catch (const std::exception& e) {
      return Status::Unavailable(std::string("gloo rendezvous: ") + e.what());
    }
    return Status::Ok();
  }
  Status Run(const float* send, float* recv, size_t count, int times) override {
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setInput(const_cast<float*>(send), count);
      opts.setOutput(recv, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      for (int i = 0; i < times; ++i) gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return Status::Aborted(std::string("gloo::allreduce: ") + e.what());
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};
#endif

#if RTFT_WITH_NCCL
long long WallUs() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

// Polls a non-blocking communicator until it leaves ncclInProgress (or `stop` says to give up).
ncclResult_t Settle(
    ncclComm_t comm, const std::function<bool()>& stop = [] { return false; }) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (stop()) return ncclInProgress;
    std::this_thread::yield();
  }
}

Status NcclError(const char* what, ncclResult_t rc) {
  return Status::Aborted(std::string(what) + ": " + ncclGetErrorString(rc));
}

// Rank 0 draws the unique id and puts it under `prefix`id; the others wait for it (60 s).
StatusOr<ncclUniqueId> ShareNcclId(int rank, CommStore* store, const std::string& prefix) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return Status::Unavailable("ncclGetUniqueId");
    RTFT_RETURN_IF_ERROR(store->Put(prefix + "id", std::string(id.internal, sizeof(id.internal))));
    return id;
  }
  RTFT_ASSIGN_OR_RETURN(std::string v,
                        store->Get(prefix + "id", CommClock::now() + milliseconds(60000)));
  if (v.size() != sizeof(id.internal)) return Status::DataLoss("bad NCCL id");
  std::memcpy(id.internal, v.data(), sizeof(id.internal));
  return id;
}

class NcclDirect final : public DirectAllReduce {
 public:
  ~NcclDirect() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // nonblocking: a non-blocking communicator (ncclConfig_t.blocking = 0) polled after each call as
  // rt-ft's is, without rt-ft: what NCCL's non-blocking mode itself costs.
  explicit NcclDirect(bool nonblocking) : nonblocking_(nonblocking) {}
  Status Init(int rank, int world, CommStore* store, const std::string& prefix, int device) {
    if (cudaSetDevice(device) != cudaSuccess) return Status::Unavailable("cudaSetDevice");
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      return Status::Unavailable("cudaStreamCreate");
    RTFT_ASSIGN_OR_RETURN(const ncclUniqueId id, ShareNcclId(rank, store, prefix));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = nonblocking_ ? 0 : 1;
    const ncclResult_t rc = ncclCommInitRankConfig(&comm_, world, id, rank, &config);
    if ((rc != ncclSuccess && rc != ncclInProgress) || Settled() != ncclSuccess)
      return Status::Unavailable(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(rc));
    return Status::Ok();
  }
  Status Run(const float* send, float* recv, size_t count, int times) override {
    for (int i = 0; i < times; ++i) {
      ncclResult_t rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm_, stream_);
      if (rc == ncclInProgress || (rc == ncclSuccess && nonblocking_)) rc = Settled();
      if (rc != ncclSuccess) return Status::Aborted(ncclGetErrorString(rc));
    }
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return Status::Aborted("stream");
    return Status::Ok();
  }

 private:
  ncclResult_t Settled() { return nonblocking_ ? Settle(comm_) : ncclSuccess; }

  const bool nonblocking_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};
#endif

}  // namespace

StatusOr<std::unique_ptr<DirectAllReduce>> NewDirectAllReduce(CommBackend backend, int rank,
                                                              int world, CommStore* store,
                                                              const std::string& prefix, int device,
                                                              bool nonblocking) {
  if (backend == CommBackend::kGloo) {
#if RTFT_WITH_GLOO
    auto d = std::make_unique<GlooDirect>();
    RTFT_RETURN_IF_ERROR(d->Init(rank, world, store, prefix));
    return std::unique_ptr<DirectAllReduce>(std::move(d));
#endif
  } else {
#if RTFT_WITH_NCCL
    auto d = std::make_unique<NcclDirect>(nonblocking);
    RTFT_RETURN_IF_ERROR(d->Init(rank, world, store, prefix, device));
    return std::unique_ptr<DirectAllReduce>(std::move(d));
#endif
  }
  (void)rank, (void)world, (void)store, (void)prefix, (void)device, (void)nonblocking;
  return Status::Unimplemented(std::string("no ") + CommBackendName(backend) + " in this build");
}

#if RTFT_WITH_NCCL
Status NcclShrinkProbe(int rank, int world, int victim, size_t bytes, bool revoke, CommStore* store,
                       const std::string& prefix, int device,
                       const std::atomic<long long>& event_us,
                       const std::function<void(const std::string&)>& log) {
  if (cudaSetDevice(device) != cudaSuccess) return Status::Unavailable("cudaSetDevice");
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return Status::Unavailable("cudaStreamCreate");
  const size_t count = bytes / 4;
  float *send = nullptr, *recv = nullptr;
  if (cudaMalloc(&send, count * 4) != cudaSuccess || cudaMalloc(&recv, count * 4) != cudaSuccess)
    return Status::ResourceExhausted("cudaMalloc");
  std::vector<float> ones(count, 1.0f);
  cudaMemcpy(send, ones.data(), count * 4, cudaMemcpyHostToDevice);
  RTFT_ASSIGN_OR_RETURN(const ncclUniqueId id, ShareNcclId(rank, store, prefix));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) return NcclError("ncclCommInitRankConfig", rc);
  if ((rc = Settle(comm)) != ncclSuccess) return NcclError("init", rc);
  auto failed = [&] { return event_us.load() != 0; };
  // All-reduces until the victim's slot is lost: the survivors' last one never completes.
  for (int i = 0; !failed(); ++i) {
    if (i == 2 && rank == victim) FaultPoint("bench.shrink.victim");  // hangs until killed
    rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream);
    if (rc != ncclSuccess && rc != ncclInProgress) return NcclError("ncclAllReduce", rc);
    if ((rc = Settle(comm, failed)) != ncclSuccess && rc != ncclInProgress) break;
    while (!failed() && cudaStreamQuery(stream) == cudaErrorNotReady) std::this_thread::yield();
  }
  while (!failed()) std::this_thread::sleep_for(milliseconds(1));
  const long long event = event_us.load();
  // Revoke (NCCL 2.28): in-flight work stops, the state goes ncclInProgress until the
  // communicator is quiet; then a plain shrink. Without it, a shrink that aborts the parent's
  // work first (NCCL_SHRINK_ABORT, 2.27).
  if (revoke) {
    rc = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
    if (rc != ncclSuccess && rc != ncclInProgress) return NcclError("ncclCommRevoke", rc);
  }
  rc = Settle(comm);
  const long long revoked = WallUs();
  if (rc != ncclSuccess) return NcclError("waiting for the revoke", rc);
  int exclude[] = {victim};
  ncclComm_t shrunk = nullptr;
  ncclConfig_t child = NCCL_CONFIG_INITIALIZER;
  child.blocking = 0;
  rc = ncclCommShrink(comm, exclude, 1, &shrunk, &child,
                      revoke ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT);
  if (rc != ncclSuccess && rc != ncclInProgress) return NcclError("ncclCommShrink", rc);
  // A non-blocking shrink may hand out the new communicator only once the parent is settled.
  if ((rc = Settle(comm)) != ncclSuccess) return NcclError("shrinking (parent)", rc);
  if (shrunk == nullptr) return Status::Internal("ncclCommShrink gave no communicator");
  if ((rc = Settle(shrunk)) != ncclSuccess) return NcclError("waiting for the shrink", rc);
  const long long ready = WallUs();
  int new_world = 0;
  ncclCommCount(shrunk, &new_world);
  rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, shrunk, stream);
  if (rc != ncclSuccess && rc != ncclInProgress) return NcclError("ncclAllReduce (shrunk)", rc);
  if ((rc = Settle(shrunk)) != ncclSuccess) return NcclError("all-reduce (shrunk)", rc);
  if (cudaStreamSynchronize(stream) != cudaSuccess) return Status::Aborted("stream");
  const long long checked = WallUs();
  float first = 0;
  cudaMemcpy(&first, recv, 4, cudaMemcpyDeviceToHost);
  if (first != static_cast<float>(new_world))
    return Status::DataLoss("the shrunk communicator summed " + std::to_string(first) + ", not " +
                            std::to_string(new_world));
  char line[200];
  std::snprintf(line, sizeof(line), "shrink revoke_ms=%.3f shrink_ms=%.3f check_ms=%.3f world=%d",
                (revoked - event) / 1e3, (ready - revoked) / 1e3, (checked - ready) / 1e3,
                new_world);
  log(line);
  ncclCommDestroy(shrunk);
  ncclCommAbort(comm);  // a dead peer belongs to it: never destroyed, only aborted
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(stream);
  return Status::Ok();
}
#else
Status NcclShrinkProbe(int, int, int, size_t, bool, CommStore*, const std::string&, int,
                       const std::atomic<long long>&,
                       const std::function<void(const std::string&)>&) {
  return Status::Unimplemented("no NCCL in this build");
}
#endif

}  // namespace rtft::bench
