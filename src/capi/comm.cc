// Communicators through the C API (include/rtft/rtft.h, "Communicators"): one epoch's, over every
// rank of it; the calls of rtft::Communicator with their default deadlines.
#include "capi/handles.h"

using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;
using rtft::StatusOr;
using rtft::capi::Call;
using rtft::capi::CheckDType;
using rtft::capi::CheckReduceOp;
using rtft::capi::NotNull;

namespace {

StatusOr<rtft::Communicator*> Get(rtft_comm_t* comm) {
  RTFT_RETURN_IF_ERROR(NotNull(comm, "comm"));
  rtft::Communicator* c = comm->get();
  if (!c) return Status::FailedPrecondition("the protector has no communicator before its start");
  return c;
}

template <typename T>
rtft_status_t Property(rtft_comm_t* comm, T* out, T (*get)(const rtft::Communicator&)) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(out, "output"));
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    *out = get(*c);
    return Status::Ok();
  });
}

}  // namespace

extern "C" {

rtft_status_t rtft_comm_create(rtft_runtime_t* runtime, const char* name, int backend,
                               rtft_comm_t** comm) {
  return Call([&]() -> Status {
    RTFT_RETURN_IF_ERROR(NotNull(runtime, "rtft_comm_create: runtime"));
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckName(name, 64, "rtft_comm_create: name"));
    RTFT_RETURN_IF_ERROR(NotNull(comm, "rtft_comm_create: comm"));
    *comm = nullptr;
    rtft::CommOptions o;
    RTFT_RETURN_IF_ERROR(rtft::capi::CheckBackend(backend, &o.backend));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<rtft::Communicator> c,
                          runtime->runtime->CreateCommunicator(name, o));
    auto handle = std::make_unique<rtft_comm>();
    handle->owned = std::move(c);
    *comm = handle.release();
    return Status::Ok();
  });
}

rtft_status_t rtft_comm_destroy(rtft_comm_t* comm) {
  return Call([&] {
    if (comm && !comm->owned)
      return Status::InvalidArgument("rtft_comm_destroy: the protector's communicator is its own");
    delete comm;
    return Status::Ok();
  });
}

rtft_status_t rtft_comm_rank(rtft_comm_t* comm, int* rank) {
  return Property<int>(comm, rank, [](const rtft::Communicator& c) { return c.rank(); });
}

rtft_status_t rtft_comm_world_size(rtft_comm_t* comm, int* world_size) {
  return Property<int>(comm, world_size,
                       [](const rtft::Communicator& c) { return c.world_size(); });
}

rtft_status_t rtft_comm_epoch(rtft_comm_t* comm, uint64_t* epoch) {
  return Property<uint64_t>(comm, epoch, [](const rtft::Communicator& c) { return c.epoch(); });
}

rtft_status_t rtft_comm_all_reduce(rtft_comm_t* comm, const void* send, void* recv, size_t count,
                                   int dtype, int op) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    ReduceOp r;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    RTFT_RETURN_IF_ERROR(CheckReduceOp(op, &r));
    return c->AllReduce(send, recv, count, t, r);
  });
}

rtft_status_t rtft_comm_broadcast(rtft_comm_t* comm, void* buffer, size_t count, int dtype,
                                  int root) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    return c->Broadcast(buffer, count, t, root);
  });
}

rtft_status_t rtft_comm_all_gather(rtft_comm_t* comm, const void* send, void* recv, size_t count,
                                   int dtype) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    return c->AllGather(send, recv, count, t);
  });
}

rtft_status_t rtft_comm_all_gather_v(rtft_comm_t* comm, const void* send, void* recv,
                                     const size_t* counts, int dtype) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    RTFT_RETURN_IF_ERROR(NotNull(counts, "rtft_comm_all_gather_v: counts"));
    return c->AllGatherV(send, recv, std::vector<size_t>(counts, counts + c->world_size()), t);
  });
}

rtft_status_t rtft_comm_reduce_scatter(rtft_comm_t* comm, const void* send, void* recv,
                                       size_t count, int dtype, int op) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    ReduceOp r;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    RTFT_RETURN_IF_ERROR(CheckReduceOp(op, &r));
    return c->ReduceScatter(send, recv, count, t, r);
  });
}

rtft_status_t rtft_comm_send(rtft_comm_t* comm, const void* buffer, size_t count, int dtype,
                             int peer) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    return c->Send(buffer, count, t, peer);
  });
}

rtft_status_t rtft_comm_recv(rtft_comm_t* comm, void* buffer, size_t count, int dtype, int peer) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    DType t;
    RTFT_RETURN_IF_ERROR(CheckDType(dtype, &t));
    return c->Recv(buffer, count, t, peer);
  });
}

rtft_status_t rtft_comm_barrier(rtft_comm_t* comm) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    return c->Barrier();
  });
}

rtft_status_t rtft_comm_abort(rtft_comm_t* comm) {
  return Call([&]() -> Status {
    RTFT_ASSIGN_OR_RETURN(rtft::Communicator * c, Get(comm));
    c->Abort();
    return Status::Ok();
  });
}

}  // extern "C"
