// The collectives of the NCCL backend: each one enqueues NCCL work on the caller's stream. The
// V variants are NCCL groups of one broadcast (all-gather) or reduce (reduce-scatter) per rank.
#include <cuda_runtime_api.h>

#include "comm/nccl/nccl_comm.h"
#include "core/fault_point.h"

namespace rtft::comm::nccl_backend {
namespace {

ncclDataType_t Type(DType d) {
  switch (d) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kFloat64:
      return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t Op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

cudaStream_t Stream(const CallOptions& c) { return static_cast<cudaStream_t>(c.stream); }

Status Check(size_t bytes, const void* a, const void* b) {
  if (bytes > 0 && (a == nullptr || b == nullptr))
    return Status::InvalidArgument("a null buffer for a non-empty call");
  return Status::Ok();
}

StatusOr<std::vector<size_t>> Displacements(const std::vector<size_t>& counts, int n) {
  if (counts.size() != static_cast<size_t>(n))
    return Status::InvalidArgument("counts has " + std::to_string(counts.size()) + " entries for " +
                                   std::to_string(n) + " ranks");
  std::vector<size_t> displ(n);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    displ[r] = at;
    if (at + counts[r] < at) return Status::InvalidArgument("counts overflow");
    at += counts[r];
  }
  return displ;
}

}  // namespace

Status NcclComm::AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "all-reduce"));
  RTFT_RETURN_IF_ERROR(Check(bytes, send, recv));
  FaultPoint("comm.nccl.allreduce");
  return Enqueue("ncclAllReduce", call, [&](ncclComm_t c) {
    // One rank's reduction is its input, whatever the op: a copy. NCCL 2.28.9's ncclAvg of
    // float64 on one rank leaves the elements past the last multiple of 2^20 unwritten (seen on
    // an H200; the float64 GPU test checks it), so one rank never asks NCCL.
    if (world_size() == 1) {
      if (send == recv || bytes == 0) return ncclSuccess;
      return cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, Stream(call)) ==
                     cudaSuccess
                 ? ncclSuccess
                 : ncclUnhandledCudaError;
    }
    return ncclAllReduce(send, recv, count, Type(dtype), Op(op), c, Stream(call));
  });
}

Status NcclComm::Broadcast(void* buffer, size_t count, DType dtype, int root,
                           const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "broadcast"));
  RTFT_RETURN_IF_ERROR(Check(bytes, buffer, buffer));
  if (root < 0 || root >= world_size())
    return Status::InvalidArgument("broadcast root " + std::to_string(root) + " outside 0.." +
                                   std::to_string(world_size() - 1));
  return Enqueue("ncclBroadcast", call, [&](ncclComm_t c) {
    return ncclBroadcast(buffer, buffer, count, Type(dtype), root, c, Stream(call));
  });
}

Status NcclComm::AllGather(const void* send, void* recv, size_t count, DType dtype,
                           const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "all-gather"));
  RTFT_RETURN_IF_ERROR(Check(bytes, send, recv));
  return Enqueue("ncclAllGather", call, [&](ncclComm_t c) {
    return ncclAllGather(send, recv, count, Type(dtype), c, Stream(call));
  });
}

Status NcclComm::AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType dtype, const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(std::vector<size_t> displ, Displacements(counts, world_size()));
  const size_t esize = DTypeSize(dtype);
  RTFT_RETURN_IF_ERROR(Check(counts[rank()] * esize, send, recv));
  return Enqueue("all-gather-v (ncclBroadcast group)", call, [&](ncclComm_t c) {
    ncclResult_t rc = ncclGroupStart();
    for (int r = 0; r < world_size() && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
      char* dst = static_cast<char*>(recv) + displ[r] * esize;
      const void* src = r == rank() ? send : dst;
      rc = ncclBroadcast(src, dst, counts[r], Type(dtype), r, c, Stream(call));
    }
    const ncclResult_t end = ncclGroupEnd();
    return rc == ncclSuccess || rc == ncclInProgress ? end : rc;
  });
}

Status NcclComm::ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "reduce-scatter"));
  RTFT_RETURN_IF_ERROR(Check(bytes, send, recv));
  return Enqueue("ncclReduceScatter", call, [&](ncclComm_t c) {
    return ncclReduceScatter(send, recv, count, Type(dtype), Op(op), c, Stream(call));
  });
}

Status NcclComm::ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType dtype, ReduceOp op, const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(std::vector<size_t> displ, Displacements(counts, world_size()));
  const size_t esize = DTypeSize(dtype);
  RTFT_RETURN_IF_ERROR(Check(counts[rank()] * esize, send, recv));
  return Enqueue("reduce-scatter-v (ncclReduce group)", call, [&](ncclComm_t c) {
    ncclResult_t rc = ncclGroupStart();
    for (int r = 0; r < world_size() && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
      const char* src = static_cast<const char*>(send) + displ[r] * esize;
      // Only the root writes its receive buffer; the others name their own input, untouched.
      void* dst = r == rank() ? recv : const_cast<char*>(src);
      rc = ncclReduce(src, dst, counts[r], Type(dtype), Op(op), r, c, Stream(call));
    }
    const ncclResult_t end = ncclGroupEnd();
    return rc == ncclSuccess || rc == ncclInProgress ? end : rc;
  });
}

Status NcclComm::Send(const void* buffer, size_t count, DType dtype, int peer,
                      const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "send"));
  RTFT_RETURN_IF_ERROR(Check(bytes, buffer, buffer));
  if (peer < 0 || peer >= world_size() || peer == rank())
    return Status::InvalidArgument("send to rank " + std::to_string(peer) + ": not a peer");
  return Enqueue("ncclSend", call, [&](ncclComm_t c) {
    return ncclSend(buffer, count, Type(dtype), peer, c, Stream(call));
  });
}

Status NcclComm::Recv(void* buffer, size_t count, DType dtype, int peer, const CallOptions& call) {
  RTFT_ASSIGN_OR_RETURN(size_t bytes, CountBytes(count, dtype, "recv"));
  RTFT_RETURN_IF_ERROR(Check(bytes, buffer, buffer));
  if (peer < 0 || peer >= world_size() || peer == rank())
    return Status::InvalidArgument("recv from rank " + std::to_string(peer) + ": not a peer");
  return Enqueue("ncclRecv", call, [&](ncclComm_t c) {
    return ncclRecv(buffer, count, Type(dtype), peer, c, Stream(call));
  });
}

// Blocks like Gloo's: an all-reduce of one word on the stream, then a wait for it.
Status NcclComm::Barrier(const CallOptions& call) {
  RTFT_RETURN_IF_ERROR(Enqueue("barrier (ncclAllReduce)", call, [&](ncclComm_t c) {
    return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, c, Stream(call));
  }));
  return Wait(call.stream, call.timeout);
}

}  // namespace rtft::comm::nccl_backend
