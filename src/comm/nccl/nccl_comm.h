// The NCCL backend: a non-blocking NCCL communicator (ncclConfig_t.blocking = 0) whose unique id
// travels through the store. Calls enqueue on the caller's CUDA stream; Wait() polls the stream
// and ncclCommGetAsyncError. Abort() hands ncclCommAbort (about half a second with a dead peer) to
// a thread of its own, so the caller never waits for it. No NCCL or CUDA type leaves
// src/comm/nccl/.
#pragma once

#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/comm_internal.h"

namespace rtft::comm::nccl_backend {

class NcclComm final : public Communicator {
 public:
  static StatusOr<std::unique_ptr<Communicator>> Create(const ResolvedOptions& options);
  ~NcclComm() override;

  CommBackend backend() const override { return CommBackend::kNccl; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  int rank() const override { return opts_.o.rank; }
  int world_size() const override { return opts_.o.world_size; }
  uint64_t epoch() const override { return opts_.o.epoch; }
  const std::string& name() const override { return opts_.o.name; }

  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                   const CallOptions& call) override;
  Status Broadcast(void* buffer, size_t count, DType dtype, int root,
                   const CallOptions& call) override;
  Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                   const CallOptions& call) override;
  Status AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                    const CallOptions& call) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                       const CallOptions& call) override;
  Status ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType dtype, ReduceOp op, const CallOptions& call) override;
  Status Send(const void* buffer, size_t count, DType dtype, int peer,
              const CallOptions& call) override;
  Status Recv(void* buffer, size_t count, DType dtype, int peer, const CallOptions& call) override;
  Status Barrier(const CallOptions& call) override;
  Status Wait(void* stream, std::chrono::milliseconds timeout) override;
  void Abort() override { Abort("aborted by the application or a failure event"); }
  bool aborted() const override { return aborted_.load(); }

  void Abort(const std::string& reason);

 private:
  explicit NcclComm(const ResolvedOptions& options) : opts_(options) {}
  Status Init();
  StatusOr<std::string> UniqueId();
  // Runs `enqueue` (NCCL calls on the communicator) and waits until NCCL has taken the work (a
  // non-blocking communicator may answer ncclInProgress); the work itself runs on the stream.
  Status Enqueue(const char* what, const CallOptions& call,
                 const std::function<ncclResult_t(ncclComm_t)>& enqueue);
  // Polls ncclCommGetAsyncError until it leaves ncclInProgress.
  Status Settle(const char* what, Clock::time_point deadline);
  Status Usable() const;
  Status Fail(const std::string& what, ncclResult_t rc);

  // The NCCL communicator and the lock that serializes NCCL calls on it. Shared with the abort
  // thread, which may outlive this object: destroying an aborted communicator does not wait for
  // ncclCommAbort (it finishes on its own while the next epoch's communicator is built).
  struct Handle {
    std::mutex mu;
    ncclComm_t comm = nullptr;
  };

  const ResolvedOptions opts_;
  std::shared_ptr<Handle> h_ = std::make_shared<Handle>();
  void* barrier_word_ = nullptr;  // device memory for Barrier's all-reduce

  mutable std::mutex state_mu_;
  std::string abort_reason_;
  std::atomic<bool> aborted_{false};
  AbortRegistry::Token abort_token_ = 0;
  bool subscribed_ = false;
};

}  // namespace rtft::comm::nccl_backend
