#include "tools/rtft_bench/comm_direct.h"
#include "core/build_config.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

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
  Status Run(const float* send, float* recv, size_t count) override {
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setInput(const_cast<float*>(send), count);
      opts.setOutput(recv, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(opts);
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
class NcclDirect final : public DirectAllReduce {
 public:
  ~NcclDirect() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Status Init(int rank, int world, CommStore* store, const std::string& prefix, int device) {
    if (cudaSetDevice(device) != cudaSuccess) return Status::Unavailable("cudaSetDevice");
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      return Status::Unavailable("cudaStreamCreate");
    ncclUniqueId id;
    if (rank == 0) {
      if (ncclGetUniqueId(&id) != ncclSuccess) return Status::Unavailable("ncclGetUniqueId");
      RTFT_RETURN_IF_ERROR(
          store->Put(prefix + "id", std::string(id.internal, sizeof(id.internal))));
    } else {
      RTFT_ASSIGN_OR_RETURN(std::string v,
                            store->Get(prefix + "id", CommClock::now() + milliseconds(60000)));
      if (v.size() != sizeof(id.internal)) return Status::DataLoss("bad NCCL id");
      std::memcpy(id.internal, v.data(), sizeof(id.internal));
    }
    const ncclResult_t rc = ncclCommInitRank(&comm_, world, id, rank);
    if (rc != ncclSuccess)
      return Status::Unavailable(std::string("ncclCommInitRank: ") + ncclGetErrorString(rc));
    return Status::Ok();
  }
  Status Run(const float* send, float* recv, size_t count) override {
    const ncclResult_t rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm_, stream_);
    if (rc != ncclSuccess) return Status::Aborted(ncclGetErrorString(rc));
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return Status::Aborted("stream");
    return Status::Ok();
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};
#endif

}  // namespace

StatusOr<std::unique_ptr<DirectAllReduce>> NewDirectAllReduce(CommBackend backend, int rank,
                                                              int world, CommStore* store,
                                                              const std::string& prefix,
                                                              int device) {
  if (backend == CommBackend::kGloo) {
#if RTFT_WITH_GLOO
    auto d = std::make_unique<GlooDirect>();
    RTFT_RETURN_IF_ERROR(d->Init(rank, world, store, prefix));
    return std::unique_ptr<DirectAllReduce>(std::move(d));
#endif
  } else {
#if RTFT_WITH_NCCL
    auto d = std::make_unique<NcclDirect>();
    RTFT_RETURN_IF_ERROR(d->Init(rank, world, store, prefix, device));
    return std::unique_ptr<DirectAllReduce>(std::move(d));
#endif
  }
  (void)rank, (void)world, (void)store, (void)prefix, (void)device;
  return Status::Unimplemented(std::string("no ") + CommBackendName(backend) + " in this build");
}

}  // namespace rtft::bench
