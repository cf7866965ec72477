// rtft._core.Runtime (include/rtft/runtime.h): the process's place in the job under dp-launch,
// failure events as callbacks (run on the runtime's thread, with the GIL) and as a queue, the
// job's key-value store, and the communicators of the current epoch.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <vector>

#include "python/bind.h"
#include "python/comm.h"
#include "python/runtime_wrapper.h"

namespace rtft::python {

namespace {

Runtime::Listener WrapListener(py::object fn) {
  if (!PyCallable_Check(fn.ptr())) throw py::type_error("a listener must be callable");
  PyHandle h = Hold(std::move(fn));
  return [h](const FailureEvent& event) {
    if (!PythonAlive()) return;
    py::gil_scoped_acquire gil;
    try {
      h->get()(event);
    } catch (py::error_already_set& e) {
      // A listener runs on the runtime's thread: its exception has nowhere to go but the log.
      e.discard_as_unraisable("rtft: a failure-event listener");
    } catch (const std::exception&) {
    }
  };
}

CommOptions CommFrom(const std::string& backend, std::optional<double> timeout,
                     std::optional<double> create_timeout, int device, const std::string& host) {
  CommOptions o;
  if (!ParseCommBackend(backend, &o.backend))
    throw StatusError(Status::InvalidArgument("backend '" + backend + "': expected gloo or nccl"));
  o.timeout = Timeout(timeout, "timeout").value_or(std::chrono::milliseconds(0));
  o.create_timeout =
      Timeout(create_timeout, "create_timeout").value_or(std::chrono::milliseconds(0));
  o.device = device;
  o.host = host;
  return o;
}

template <typename F>
std::unique_ptr<PyComm> MakeComm(F&& create) {
  StatusOr<std::unique_ptr<Communicator>> made = Status::Internal("");
  {
    py::gil_scoped_release nogil;
    made = create();
  }
  return std::make_unique<PyComm>(Unwrap(std::move(made)));
}

}  // namespace

PyRuntime::PyRuntime(std::optional<double> standby_timeout, double connect_timeout) {
  RuntimeOptions o;
  if (standby_timeout) o.standby_timeout = *Timeout(standby_timeout, "standby_timeout");
  o.connect_timeout = *Timeout(connect_timeout, "connect_timeout");
  StatusOr<std::unique_ptr<Runtime>> rt = Status::Internal("");
  {
    py::gil_scoped_release nogil;
    rt = Runtime::Create(o);
  }
  rt_ = Unwrap(std::move(rt));
}

PyRuntime::~PyRuntime() {
  // Its thread may be waiting for the GIL to run a listener.
  py::gil_scoped_release nogil;
  rt_.reset();
}

void BindRuntime(py::module_& m) {
  py::enum_<RuntimeRole>(m, "RuntimeRole")
      .value("INITIAL", RuntimeRole::kInitial)
      .value("SPARE_ACTIVATED", RuntimeRole::kSpareActivated)
      .value("RESTARTED", RuntimeRole::kRestarted)
      .value("STANDALONE", RuntimeRole::kStandalone);
  py::class_<RuntimeInfo>(m, "RuntimeInfo")
      .def_readonly("role", &RuntimeInfo::role)
      .def_readonly("rank", &RuntimeInfo::rank)
      .def_readonly("world_size", &RuntimeInfo::world_size)
      .def_readonly("epoch", &RuntimeInfo::epoch)
      .def_readonly("slot", &RuntimeInfo::slot)
      .def_readonly("device", &RuntimeInfo::device)
      .def("__repr__", [](const RuntimeInfo& i) {
        return std::string("RuntimeInfo(role=") + RuntimeRoleName(i.role) +
               ", rank=" + std::to_string(i.rank) + ", world_size=" + std::to_string(i.world_size) +
               ", epoch=" + std::to_string(i.epoch) + ")";
      });
  py::class_<FailureEvent>(m, "FailureEvent")
      .def_readonly("epoch", &FailureEvent::epoch)
      .def_readonly("rank", &FailureEvent::rank)
      .def_readonly("failed_ranks", &FailureEvent::failed_ranks)
      .def_readonly("reason", &FailureEvent::reason)
      .def_readonly("world_size", &FailureEvent::world_size)
      .def_readonly("shutdown", &FailureEvent::shutdown)
      .def_readonly("checkpoint_first", &FailureEvent::checkpoint_first);
  py::class_<PyRuntime> r(m, "Runtime", "The application's side of its dp-launch agent");
  r.def(py::init<std::optional<double>, double>(), py::arg("standby_timeout") = py::none(),
        py::arg("connect_timeout") = 10.0,
        "Attaches to the slot's agent (a warm spare waits here, without the GIL, until it is "
        "given a rank); without dp-launch, a standalone runtime: rank 0 of 1");
  r.def_property_readonly("info", [](PyRuntime& s) { return s.get()->info(); });
  r.def(
      "current", [](PyRuntime& s) { return s.get()->current(); },
      "The epoch, rank and world size of the latest event");
  r.def(
      "subscribe", [](PyRuntime& s, py::object fn) { return s.get()->Subscribe(WrapListener(fn)); },
      py::arg("listener"),
      "listener(event) runs on the runtime's thread at every failure event; returns a token");
  r.def(
      "unsubscribe", [](PyRuntime& s, uint64_t token) { s.get()->Unsubscribe(token); },
      py::arg("token"), py::call_guard<py::gil_scoped_release>());
  r.def(
      "on_failure",
      [](PyRuntime& s, py::object fn) {
        Runtime::Listener l = fn.is_none() ? Runtime::Listener() : WrapListener(fn);
        py::gil_scoped_release nogil;
        s.get()->OnFailure(std::move(l));
      },
      py::arg("listener"));
  r.def(
      "poll_event", [](PyRuntime& s) { return s.get()->PollEvent(); },
      "The next event not yet polled, or None");
  r.def(
      "report_step", [](PyRuntime& s, uint64_t step) { ThrowIfError(s.get()->ReportStep(step)); },
      py::arg("step"), py::call_guard<py::gil_scoped_release>());
  r.def(
      "report_device_error",
      [](PyRuntime& s, const std::string& detail) {
        ThrowIfError(s.get()->ReportDeviceError(detail));
      },
      py::arg("detail"), py::call_guard<py::gil_scoped_release>());
  r.def(
      "kv_put",
      [](PyRuntime& s, const std::string& key, const py::bytes& value) {
        std::string v = value;
        py::gil_scoped_release nogil;
        ThrowIfError(s.get()->KvPut(key, v));
      },
      py::arg("key"), py::arg("value"));
  r.def(
      "kv_get",
      [](PyRuntime& s, const std::string& key, double timeout) {
        const auto t = *Timeout(timeout, "timeout");
        StatusOr<std::string> v = Status::Internal("");
        {
          py::gil_scoped_release nogil;
          v = s.get()->KvGet(key, t);
        }
        return py::bytes(Unwrap(std::move(v)));
      },
      py::arg("key"), py::arg("timeout") = 10.0);
  r.def(
      "create_communicator",
      [](PyRuntime& s, const std::string& name, const std::string& backend,
         std::optional<double> timeout, std::optional<double> create_timeout, int device,
         const std::string& host) {
        CommOptions o = CommFrom(backend, timeout, create_timeout, device, host);
        return MakeComm([&] { return s.get()->CreateCommunicator(name, o); });
      },
      py::arg("name"), py::arg("backend") = "gloo", py::arg("timeout") = py::none(),
      py::arg("create_timeout") = py::none(), py::arg("device") = 0, py::arg("host") = "",
      py::keep_alive<0, 1>(),
      "A communicator of the current epoch over every rank, aborted at the next failure event");
  r.def(
      "create_group_communicator",
      [](PyRuntime& s, const std::string& name, int group_rank, int group_size,
         const std::string& backend, std::optional<double> timeout,
         std::optional<double> create_timeout, int device, const std::string& host,
         std::vector<int> job_ranks) {
        CommOptions o = CommFrom(backend, timeout, create_timeout, device, host);
        o.job_ranks = std::move(job_ranks);
        return MakeComm(
            [&] { return s.get()->CreateGroupCommunicator(name, group_rank, group_size, o); });
      },
      py::arg("name"), py::arg("group_rank"), py::arg("group_size"), py::arg("backend") = "gloo",
      py::arg("timeout") = py::none(), py::arg("create_timeout") = py::none(),
      py::arg("device") = 0, py::arg("host") = "", py::arg("job_ranks") = std::vector<int>(),
      py::keep_alive<0, 1>(),
      "A communicator of the current epoch over a group of its ranks; `job_ranks` (the job rank "
      "of each member) makes its calls count for the hang detector as the step's");
}

}  // namespace rtft::python
