// rtft._core.Communicator (comm.h) and the in-process store of include/rtft/comm.h.
#include "python/comm.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "python/bind.h"
#include "python/tensor.h"

namespace rtft::python {

namespace {

using Ref = std::shared_ptr<TensorRef>;

struct PyStore {
  std::unique_ptr<CommStore> store = NewLocalCommStore();
};

[[noreturn]] void Refuse(const std::string& why) {
  throw StatusError(Status::InvalidArgument(why));
}

ReduceOp ParseOp(const std::string& op) {
  for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
    if (op == ReduceOpName(o)) return o;
  Refuse("reduce op '" + op + "': expected sum, avg, max or min");
}

CommBackend ParseBackend(const std::string& name) {
  CommBackend b = CommBackend::kGloo;
  if (!ParseCommBackend(name, &b)) Refuse("backend '" + name + "': expected gloo or nccl");
  if (!CommBackendAvailable(b))
    throw StatusError(Status::Unimplemented("this build of librt-ft has no " + name + " backend"));
  return b;
}

// A buffer of a call, checked against the communicator's memory.
Ref Buffer(const Communicator& c, py::handle tensor, const char* what) {
  Ref r = TensorRef::From(tensor, what);
  if (r->memory() != c.memory())
    Refuse(std::string(what) + " is in " + (r->memory() == MemoryKind::kHost ? "host" : "device") +
           " memory; a " + CommBackendName(c.backend()) + " communicator takes " +
           (c.memory() == MemoryKind::kHost ? "host" : "device") + " memory");
  return r;
}

void SameDtype(const Ref& a, const Ref& b) {
  if (a->dtype() != b->dtype())
    Refuse(std::string("send and receive buffers differ in dtype (") + DTypeName(a->dtype()) +
           ", " + DTypeName(b->dtype()) + ")");
}

// The smaller buffer either is `large`'s slice at `slice` bytes or does not overlap it.
void SliceOrDisjoint(const Ref& small, const Ref& large, uint64_t slice, const char* call) {
  const auto* s = static_cast<const char*>(small->data());
  const auto* l = static_cast<const char*>(large->data());
  if (s == nullptr || l == nullptr) return;
  const bool disjoint = s + small->bytes() <= l || l + large->bytes() <= s;
  if (!disjoint && s != l + slice)
    Refuse(std::string(call) + ": the buffers overlap, and the smaller is not this rank's slice");
}

void SameOrDisjoint(const Ref& a, const Ref& b, const char* call) {
  const auto* x = static_cast<const char*>(a->data());
  const auto* y = static_cast<const char*>(b->data());
  if (x == y || x == nullptr || y == nullptr) return;
  if (!(x + a->bytes() <= y || y + b->bytes() <= x))
    Refuse(std::string(call) + ": the buffers partly overlap (use one buffer, in place)");
}

int CheckRank(const Communicator& c, int r, const char* what) {
  if (r < 0 || r >= c.world_size())
    Refuse(std::string(what) + " " + std::to_string(r) + " is not a rank of " +
           std::to_string(c.world_size()));
  return r;
}

std::vector<size_t> CheckCounts(const Communicator& c, const std::vector<int64_t>& counts,
                                uint64_t total, uint64_t mine, const char* call) {
  if (counts.size() != static_cast<size_t>(c.world_size()))
    Refuse(std::string(call) + ": one count per rank");
  std::vector<size_t> out;
  uint64_t sum = 0;
  for (int64_t n : counts) {
    if (n < 0) Refuse(std::string(call) + ": a negative count");
    sum += static_cast<uint64_t>(n);
    out.push_back(static_cast<size_t>(n));
  }
  if (sum != total) Refuse(std::string(call) + ": the counts do not add up to the large buffer");
  if (out[c.rank()] != mine) Refuse(std::string(call) + ": this rank's count is not its buffer's");
  return out;
}

CallOptions Call(const std::optional<double>& timeout, uintptr_t stream) {
  CallOptions o;
  o.timeout = Timeout(timeout, "timeout").value_or(std::chrono::milliseconds(0));
  o.stream = reinterpret_cast<void*>(stream);
  return o;
}

// Runs a call of the communicator without the GIL, the buffers held until it returns.
template <typename F>
void Run(F&& call) {
  Status s;
  {
    py::gil_scoped_release nogil;
    s = call();
  }
  ThrowIfError(s);
}

py::arg_v TimeoutArg() { return py::arg("timeout") = py::none(); }
py::arg_v StreamArg() { return py::arg("stream") = 0; }

}  // namespace

PyComm::~PyComm() { Close(); }

Communicator* PyComm::get() const {
  if (comm_ == nullptr || (valid_ && !valid_->load()))
    throw StatusError(Status::FailedPrecondition(
        "this communicator is gone (closed, or a step's communicator used after its step)"));
  return comm_;
}

void PyComm::Close() {
  if (owned_) {
    py::gil_scoped_release nogil;
    owned_.reset();
  }
  comm_ = nullptr;
}

void BindComm(py::module_& m) {
  py::class_<PyStore>(m, "LocalCommStore",
                      "Where the ranks of one process (threads) meet to build communicators")
      .def(py::init<>());
  py::class_<PyComm> c(m, "Communicator", "A communicator that survives a failed peer");
  c.def_static(
      "create",
      [](int rank, int world_size, PyStore* store, const std::string& name, uint64_t epoch,
         const std::string& backend, std::optional<double> timeout,
         std::optional<double> create_timeout, int device, const std::string& host) {
        if (world_size < 1 || rank < 0 || rank >= world_size)
          Refuse("Communicator.create: needs 0 <= rank < world_size");
        if (world_size > 1 && store == nullptr) Refuse("Communicator.create: needs a store");
        CommOptions o;
        o.backend = ParseBackend(backend);
        o.rank = rank;
        o.world_size = world_size;
        o.epoch = epoch;
        o.name = name;
        o.store = store ? store->store.get() : nullptr;
        o.timeout = Timeout(timeout, "timeout").value_or(std::chrono::milliseconds(0));
        o.create_timeout =
            Timeout(create_timeout, "create_timeout").value_or(std::chrono::milliseconds(0));
        o.device = device;
        o.host = host;
        StatusOr<std::unique_ptr<Communicator>> made = Status::Internal("");
        {
          py::gil_scoped_release nogil;
          made = Communicator::Create(o);
        }
        return std::make_unique<PyComm>(Unwrap(std::move(made)));
      },
      py::arg("rank"), py::arg("world_size"), py::arg("store") = nullptr,
      py::arg("name") = "default", py::arg("epoch") = 0, py::arg("backend") = "gloo",
      py::arg("timeout") = py::none(), py::arg("create_timeout") = py::none(),
      py::arg("device") = 0, py::arg("host") = "", py::keep_alive<0, 3>(),
      "Builds a communicator with every rank of the epoch (blocks until all have called it)");
  c.def(
      "all_reduce",
      [](PyComm& self, py::handle tensor, const std::string& op, py::object out,
         std::optional<double> timeout, uintptr_t stream) {
        Communicator* k = self.get();
        Ref send = Buffer(*k, tensor, "all_reduce's tensor");
        Ref recv = out.is_none() ? send : Buffer(*k, out, "all_reduce's out");
        SameDtype(send, recv);
        if (send->elements() != recv->elements()) Refuse("all_reduce: out has another size");
        SameOrDisjoint(send, recv, "all_reduce");
        const ReduceOp o = ParseOp(op);
        const CallOptions call = Call(timeout, stream);
        Run([&] {
          return k->AllReduce(send->data(), recv->data(), send->elements(), send->dtype(), o, call);
        });
      },
      py::arg("tensor"), py::arg("op") = "sum", py::arg("out") = py::none(), TimeoutArg(),
      StreamArg(), "Reduces `tensor` over every rank, in place (or into `out`)");
  c.def(
      "broadcast",
      [](PyComm& self, py::handle tensor, int root, std::optional<double> timeout,
         uintptr_t stream) {
        Communicator* k = self.get();
        Ref buf = Buffer(*k, tensor, "broadcast's tensor");
        CheckRank(*k, root, "root");
        const CallOptions call = Call(timeout, stream);
        Run([&] { return k->Broadcast(buf->data(), buf->elements(), buf->dtype(), root, call); });
      },
      py::arg("tensor"), py::arg("root") = 0, TimeoutArg(), StreamArg());
  c.def(
      "all_gather",
      [](PyComm& self, py::handle send_t, py::handle recv_t, std::optional<double> timeout,
         uintptr_t stream) {
        Communicator* k = self.get();
        Ref send = Buffer(*k, send_t, "all_gather's send"), recv = Buffer(*k, recv_t, "recv");
        SameDtype(send, recv);
        if (recv->elements() != send->elements() * k->world_size())
          Refuse("all_gather: recv must hold world_size times send's elements");
        SliceOrDisjoint(send, recv, send->bytes() * k->rank(), "all_gather");
        const CallOptions call = Call(timeout, stream);
        Run([&] {
          return k->AllGather(send->data(), recv->data(), send->elements(), send->dtype(), call);
        });
      },
      py::arg("send"), py::arg("recv"), TimeoutArg(), StreamArg(),
      "recv (world_size times send's size) receives rank r's send at r * send.numel()");
  c.def(
      "all_gather_v",
      [](PyComm& self, py::handle send_t, py::handle recv_t, const std::vector<int64_t>& counts,
         std::optional<double> timeout, uintptr_t stream) {
        Communicator* k = self.get();
        Ref send = Buffer(*k, send_t, "all_gather_v's send"), recv = Buffer(*k, recv_t, "recv");
        SameDtype(send, recv);
        std::vector<size_t> n =
            CheckCounts(*k, counts, recv->elements(), send->elements(), "all_gather_v");
        uint64_t before = 0;
        for (int r = 0; r < k->rank(); ++r) before += n[r];
        SliceOrDisjoint(send, recv, before * DTypeSize(send->dtype()), "all_gather_v");
        const CallOptions call = Call(timeout, stream);
        Run([&] { return k->AllGatherV(send->data(), recv->data(), n, send->dtype(), call); });
      },
      py::arg("send"), py::arg("recv"), py::arg("counts"), TimeoutArg(), StreamArg());
  c.def(
      "reduce_scatter",
      [](PyComm& self, py::handle send_t, py::handle recv_t, const std::string& op,
         std::optional<double> timeout, uintptr_t stream) {
        Communicator* k = self.get();
        Ref send = Buffer(*k, send_t, "reduce_scatter's send"), recv = Buffer(*k, recv_t, "recv");
        SameDtype(send, recv);
        if (send->elements() != recv->elements() * k->world_size())
          Refuse("reduce_scatter: send must hold world_size times recv's elements");
        SliceOrDisjoint(recv, send, recv->bytes() * k->rank(), "reduce_scatter");
        const ReduceOp o = ParseOp(op);
        const CallOptions call = Call(timeout, stream);
        Run([&] {
          return k->ReduceScatter(send->data(), recv->data(), recv->elements(), send->dtype(), o,
                                  call);
        });
      },
      py::arg("send"), py::arg("recv"), py::arg("op") = "sum", TimeoutArg(), StreamArg());
  c.def(
      "reduce_scatter_v",
      [](PyComm& self, py::handle send_t, py::handle recv_t, const std::vector<int64_t>& counts,
         const std::string& op, std::optional<double> timeout, uintptr_t stream) {
        Communicator* k = self.get();
        Ref send = Buffer(*k, send_t, "reduce_scatter_v's send"), recv = Buffer(*k, recv_t, "recv");
        SameDtype(send, recv);
        std::vector<size_t> n =
            CheckCounts(*k, counts, send->elements(), recv->elements(), "reduce_scatter_v");
        uint64_t before = 0;
        for (int r = 0; r < k->rank(); ++r) before += n[r];
        SliceOrDisjoint(recv, send, before * DTypeSize(send->dtype()), "reduce_scatter_v");
        const ReduceOp o = ParseOp(op);
        const CallOptions call = Call(timeout, stream);
        Run([&] {
          return k->ReduceScatterV(send->data(), recv->data(), n, send->dtype(), o, call);
        });
      },
      py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("op") = "sum", TimeoutArg(),
      StreamArg());
  c.def(
      "send",
      [](PyComm& self, py::handle tensor, int peer, std::optional<double> timeout,
         uintptr_t stream) {
        Communicator* k = self.get();
        Ref buf = Buffer(*k, tensor, "send's tensor");
        CheckRank(*k, peer, "peer");
        const CallOptions call = Call(timeout, stream);
        Run([&] { return k->Send(buf->data(), buf->elements(), buf->dtype(), peer, call); });
      },
      py::arg("tensor"), py::arg("peer"), TimeoutArg(), StreamArg());
  c.def(
      "recv",
      [](PyComm& self, py::handle tensor, int peer, std::optional<double> timeout,
         uintptr_t stream) {
        Communicator* k = self.get();
        Ref buf = Buffer(*k, tensor, "recv's tensor");
        CheckRank(*k, peer, "peer");
        const CallOptions call = Call(timeout, stream);
        Run([&] { return k->Recv(buf->data(), buf->elements(), buf->dtype(), peer, call); });
      },
      py::arg("tensor"), py::arg("peer"), TimeoutArg(), StreamArg());
  c.def(
      "barrier",
      [](PyComm& self, std::optional<double> timeout) {
        Communicator* k = self.get();
        const CallOptions call = Call(timeout, 0);
        Run([&] { return k->Barrier(call); });
      },
      TimeoutArg());
  c.def(
      "wait",
      [](PyComm& self, uintptr_t stream, std::optional<double> timeout) {
        Communicator* k = self.get();
        const auto t = Timeout(timeout, "timeout").value_or(std::chrono::milliseconds(0));
        Run([&] { return k->Wait(reinterpret_cast<void*>(stream), t); });
      },
      StreamArg(), TimeoutArg());
  c.def(
      "abort", [](PyComm& self) { self.get()->Abort(); },
      "Makes a call in flight, and every later one, raise AbortedError (any thread)");
  c.def("close", &PyComm::Close);
  c.def_property_readonly("aborted", [](PyComm& s) { return s.get()->aborted(); });
  c.def_property_readonly("rank", [](PyComm& s) { return s.get()->rank(); });
  c.def_property_readonly("world_size", [](PyComm& s) { return s.get()->world_size(); });
  c.def_property_readonly("epoch", [](PyComm& s) { return s.get()->epoch(); });
  c.def_property_readonly("name", [](PyComm& s) { return s.get()->name(); });
  c.def_property_readonly(
      "backend", [](PyComm& s) { return std::string(CommBackendName(s.get()->backend())); });
}

}  // namespace rtft::python
