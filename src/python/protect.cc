// rtft._core.Protector (include/rtft/protect.h): per-step protection and the step driver for
// Python. run() releases the GIL for the whole loop; each step function is a Python callable,
// called with the GIL and a StepContext whose communicators are valid for that step only. An
// AbortedError from a step function (a collective a failure aborted) recovers inside run(); any
// other exception ends run() and is raised again from it, with its traceback.
#include <pybind11/stl.h>

#include <utility>

#include "python/bind.h"
#include "python/comm.h"
#include "python/runtime_wrapper.h"
#include "python/state.h"
#include "python/step.h"
#include "rtft/protect.h"

namespace rtft::python {

namespace {

py::list ShardList(const ShrinkPlace& place) {
  py::list out;
  for (const TensorDesc& t : place.shards) {
    py::dict d;
    d["name"] = t.name;
    d["dtype"] = DTypeName(t.dtype);
    d["shape"] = t.shape;
    d["global_shape"] = t.shard.global_shape;
    d["offset"] = t.shard.offset;
    out.append(d);
  }
  return out;
}

class PyProtector {
 public:
  PyProtector(PyRuntime& runtime, const ProtectOptions& options) {
    StatusOr<std::unique_ptr<Protector>> p = Status::Internal("");
    {
      py::gil_scoped_release nogil;
      p = Protector::Create(runtime.get(), options);
    }
    p_ = Unwrap(std::move(p));
  }
  ~PyProtector() { Close(); }

  void Protect(std::shared_ptr<PyState> state, py::object resize) {
    if (!state) throw py::type_error("protect: state is None");
    ResizeState r;
    if (!resize.is_none()) r = WrapResize(std::move(resize));
    Status s;
    {
      py::gil_scoped_release nogil;
      s = Get()->Protect(state, std::move(r));
    }
    Finish(s);
    state->Freeze();
    state_ = std::move(state);
  }

  RunResult Run(uint64_t end_step, py::object compute, py::object update, py::object local,
                py::object reduce) {
    if (update.is_none()) throw py::type_error("update must be callable");
    if (compute.is_none() && (local.is_none() || reduce.is_none()))
      throw py::type_error("compute must be callable (or None with local and reduce)");
    if (local.is_none() != reduce.is_none())
      throw py::type_error("local and reduce are given together");
    StepFns fns{WrapStep(std::move(compute), "compute", pending_),
                WrapStep(std::move(update), "update", pending_)};
    fns.local = WrapStep(std::move(local), "local", pending_, /*names_gradients=*/true);
    fns.reduce = WrapStep(std::move(reduce), "reduce", pending_);
    return Call<RunResult>([&](Protector* p) { return p->Run(end_step, fns); });
  }

  // Runs a call that may call back into Python or rebuild the communicators, without the GIL;
  // the communicator that `comm` gave before may be gone after it.
  template <typename T>
  T Call(const std::function<StatusOr<T>(Protector*)>& call) {
    Protector* p = Get();
    comm_valid_->store(false);
    comm_valid_ = std::make_shared<std::atomic<bool>>(true);
    StatusOr<T> r = Status::Internal("");
    {
      py::gil_scoped_release nogil;
      r = call(p);
    }
    Finish(r.status());
    return std::move(r).value();
  }
  void CallStatus(const std::function<Status(Protector*)>& call) {
    Call<bool>([&](Protector* p) -> StatusOr<bool> {
      Status s = call(p);
      if (!s.ok()) return s;
      return true;
    });
  }

  // Inside a step function of run(): that step's communicator, valid until the step ends.
  py::object Comm() { return Borrow(Get()->comm(), pending_->step ? pending_->step : comm_valid_); }
  Protector* Get() const {
    if (!p_) throw StatusError(Status::FailedPrecondition("the protector is closed"));
    return p_.get();
  }
  void Close() {
    comm_valid_->store(false);
    if (p_) {
      py::gil_scoped_release nogil;
      p_.reset();
    }
    state_.reset();
  }

 private:
  ResizeState WrapResize(py::object fn) {
    if (!PyCallable_Check(fn.ptr())) throw py::type_error("resize must be callable or None");
    PyHandle h = Hold(std::move(fn));
    auto pending = pending_;
    return [h, pending](const ShrinkPlace& place) -> StatusOr<std::shared_ptr<StateProvider>> {
      std::shared_ptr<PyState> out;
      Status s = CallBack(pending, "resize", [&]() -> Status {
        py::object r = h->get()(place.rank, place.world_size, ShardList(place));
        if (!py::isinstance<PyState>(r))
          return Status::InvalidArgument("resize must return an rtft.State");
        out = r.cast<std::shared_ptr<PyState>>();
        out->Freeze();
        return Status::Ok();
      });
      if (!s.ok()) return s;
      return std::static_pointer_cast<StateProvider>(out);
    };
  }
  // Raises the exception a callable raised (the protector's, else the state's) when `s` failed,
  // else the error of `s`; forgets exceptions of a call that succeeded anyway.
  void Finish(const Status& s) {
    PyHandle mine = std::move(pending_->exception);
    pending_->exception = nullptr;
    py::object theirs = state_ ? state_->TakeException() : py::none();
    if (s.ok()) return;
    py::object exc = mine ? py::reinterpret_borrow<py::object>(mine->get()) : theirs;
    if (!exc.is_none()) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      throw py::error_already_set();
    }
    ThrowIfError(s);
  }

  std::unique_ptr<Protector> p_;
  std::shared_ptr<PyState> state_;
  std::shared_ptr<Pending> pending_ = std::make_shared<Pending>();
  Valid comm_valid_ = std::make_shared<std::atomic<bool>>(true);
};

ProtectOptions Options(bool enabled, const std::string& backend, int device, uintptr_t stream,
                       const std::string& comm_name, int64_t l3_every, const std::string& ckpt_dir,
                       const std::string& shm_dir, uint64_t max_object_bytes,
                       std::optional<double> recovery_timeout, std::optional<Grid> grid,
                       py::object protect_step, int64_t replay_every,
                       std::optional<bool> check_finite) {
  ProtectOptions o;
  o.enabled = enabled;
  if (!ParseCommBackend(backend, &o.backend))
    throw StatusError(Status::InvalidArgument("backend '" + backend + "': expected gloo or nccl"));
  o.device = device;
  o.stream = reinterpret_cast<void*>(stream);
  o.comm_name = comm_name;
  o.l3_every = l3_every;
  o.ckpt_dir = ckpt_dir;
  o.shm_dir = shm_dir;
  o.max_object_bytes = max_object_bytes;
  o.recovery_timeout =
      Timeout(recovery_timeout, "recovery_timeout").value_or(std::chrono::milliseconds(0));
  if (grid) o.grid = *grid;
  o.replay_every = replay_every;
  o.check_finite = !check_finite ? 0 : *check_finite ? 1 : -1;
  if (!protect_step.is_none()) {
    if (!PyCallable_Check(protect_step.ptr()))
      throw py::type_error("protect_step must be callable or None");
    PyHandle h = Hold(std::move(protect_step));
    o.protect_step = [h](uint64_t step) {
      if (!PythonAlive()) return true;
      py::gil_scoped_acquire gil;
      try {
        return py::bool_(h->get()(step)).cast<bool>();
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("rtft: protect_step");  // protects the step
        return true;
      }
    };
  }
  return o;
}

}  // namespace

void BindProtect(py::module_& m) {
  py::class_<Grid>(m, "Grid", "Tensor x pipeline x data layout of the ranks (protect.h)")
      .def(py::init([](int tensor, int pipeline, std::vector<int> ranks) {
             if (tensor < 1 || pipeline < 1)
               throw StatusError(Status::InvalidArgument("Grid: degrees are at least 1"));
             return Grid{tensor, pipeline, std::move(ranks)};
           }),
           py::arg("tensor") = 1, py::arg("pipeline") = 1, py::arg("ranks") = std::vector<int>{})
      .def_readonly("tensor", &Grid::tensor)
      .def_readonly("pipeline", &Grid::pipeline)
      .def_readonly("ranks", &Grid::ranks);
  py::class_<GridPlace>(m, "GridPlace")
      .def_readonly("t", &GridPlace::t)
      .def_readonly("p", &GridPlace::p)
      .def_readonly("d", &GridPlace::d)
      .def_readonly("tensor", &GridPlace::tensor)
      .def_readonly("pipeline", &GridPlace::pipeline)
      .def_readonly("data", &GridPlace::data);
  m.def(
      "place_in_grid",
      [](const Grid& grid, int world, int rank) { return Unwrap(PlaceInGrid(grid, world, rank)); },
      py::arg("grid"), py::arg("world"), py::arg("rank"),
      "Where `rank` of `world` sits in `grid`: a GridPlace (t, p, d and the three degrees)");
  m.def(
      "rank_in_grid",
      [](const Grid& grid, int world, int t, int p, int d) {
        return Unwrap(RankInGrid(grid, world, t, p, d));
      },
      py::arg("grid"), py::arg("world"), py::arg("t"), py::arg("p"), py::arg("d"),
      "The rank at (t, p, d) of `grid` over `world` ranks");
  py::class_<ProtectStats>(m, "ProtectStats",
                           "What protection cost, summed over the protected steps (protect.h)")
      .def_readonly("protected_steps", &ProtectStats::protected_steps)
      .def_readonly("replica_wait_s", &ProtectStats::replica_wait_s)
      .def_readonly("fence_wait_s", &ProtectStats::fence_wait_s)
      .def_readonly("state_bytes", &ProtectStats::state_bytes)
      .def_readonly("replica_bytes", &ProtectStats::replica_bytes)
      .def_readonly("replica_s", &ProtectStats::replica_s)
      .def_readonly("l1_copied_bytes", &ProtectStats::l1_copied_bytes)
      .def_readonly("l1_hashed_bytes", &ProtectStats::l1_hashed_bytes);
  py::class_<RecoveryInfo>(m, "RecoveryInfo", "What a recovery did")
      .def_readonly("epoch", &RecoveryInfo::epoch)
      .def_readonly("step", &RecoveryInfo::step)
      .def_readonly("source", &RecoveryInfo::source)
      .def_readonly("world_size", &RecoveryInfo::world_size)
      .def_readonly("ranks_fed", &RecoveryInfo::ranks_fed)
      .def_readonly("bytes_moved", &RecoveryInfo::bytes_moved)
      .def_readonly("wait_event_s", &RecoveryInfo::wait_event_s)
      .def_readonly("agree_s", &RecoveryInfo::agree_s)
      .def_readonly("rebuild_s", &RecoveryInfo::rebuild_s)
      .def_readonly("transfer_s", &RecoveryInfo::transfer_s)
      .def_readonly("total_s", &RecoveryInfo::total_s)
      .def_readonly("final_checkpoint", &RecoveryInfo::final_checkpoint);
  py::enum_<RunOutcome>(m, "RunOutcome")
      .value("DONE", RunOutcome::kDone)
      .value("SHUTDOWN", RunOutcome::kShutdown);
  py::class_<RunResult>(m, "RunResult")
      .def_readonly("outcome", &RunResult::outcome)
      .def_readonly("next_step", &RunResult::next_step)
      .def_readonly("checkpointed", &RunResult::checkpointed)
      .def("__repr__", [](const RunResult& r) {
        return std::string("RunResult(outcome=") + RunOutcomeName(r.outcome) +
               ", next_step=" + std::to_string(r.next_step) + ")";
      });
  BindStepContext(m);
  py::class_<PyProtector>(m, "Protector", "Per-step protection and the step driver")
      .def(py::init([](PyRuntime& rt, bool enabled, const std::string& backend, int device,
                       uintptr_t stream, const std::string& comm_name, int64_t l3_every,
                       const std::string& ckpt_dir, const std::string& shm_dir,
                       uint64_t max_object_bytes, std::optional<double> recovery_timeout,
                       std::optional<Grid> grid, py::object protect_step, int64_t replay_every,
                       std::optional<bool> check_finite) {
             return std::make_unique<PyProtector>(
                 rt, Options(enabled, backend, device, stream, comm_name, l3_every, ckpt_dir,
                             shm_dir, max_object_bytes, recovery_timeout, grid, protect_step,
                             replay_every, check_finite));
           }),
           py::arg("runtime"), py::kw_only(), py::arg("enabled") = true,
           py::arg("backend") = "gloo", py::arg("device") = -1, py::arg("stream") = 0,
           py::arg("comm_name") = "train", py::arg("l3_every") = 0, py::arg("ckpt_dir") = "",
           py::arg("shm_dir") = "", py::arg("max_object_bytes") = 0,
           py::arg("recovery_timeout") = py::none(), py::arg("grid") = py::none(),
           py::arg("protect_step") = py::none(), py::arg("replay_every") = 0,
           py::arg("check_finite") = py::none(), py::keep_alive<1, 2>())
      .def("protect", &PyProtector::Protect, py::arg("state"), py::arg("resize") = py::none(),
           "Describes the protected state once, before the first step")
      .def("run", &PyProtector::Run, py::arg("end_step"), py::arg("compute"), py::arg("update"),
           py::arg("local") = py::none(), py::arg("reduce") = py::none(),
           "Runs the steps up to end_step (exclusive): compute(ctx), then update(ctx) once the "
           "step's snapshot is taken; recovers inside; returns a RunResult. local(ctx) and "
           "reduce(ctx) split compute for the replay of steps (replay_every): local computes "
           "the gradients of ctx.data_rank's data with no collective and names them in "
           "ctx.gradients, reduce runs their collectives")
      .def("start",
           [](PyProtector& s) { return s.Call<uint64_t>([](Protector* p) { return p->Start(); }); })
      .def("begin_step",
           [](PyProtector& s, uint64_t step) {
             s.CallStatus([&](Protector* p) { return p->BeginStep(step); });
           })
      .def("before_update",
           [](PyProtector& s) { s.CallStatus([](Protector* p) { return p->BeforeUpdate(); }); })
      .def("end_step",
           [](PyProtector& s) { s.CallStatus([](Protector* p) { return p->EndStep(); }); })
      .def("recover",
           [](PyProtector& s) {
             return s.Call<uint64_t>([](Protector* p) { return p->Recover(); });
           })
      .def(
          "stats",
          [](PyProtector& s) {
            return s.Call<ProtectStats>(
                [](Protector* p) -> StatusOr<ProtectStats> { return p->stats(); });
          },
          "What protection cost so far: a ProtectStats (replica_bytes: what L2 sent and "
          "received)")
      .def("checkpoint_now",
           [](PyProtector& s) { s.CallStatus([](Protector* p) { return p->CheckpointNow(); }); })
      .def(
          "pause", [](PyProtector& s, bool paused) { s.Get()->Pause(paused); }, py::arg("paused"))
      .def_property_readonly("comm", &PyProtector::Comm,
                             "The training communicator of the current epoch (bracket only)")
      .def_property_readonly("last_recovery",
                             [](PyProtector& s) { return s.Get()->last_recovery(); })
      .def("close", &PyProtector::Close);
}

}  // namespace rtft::python
