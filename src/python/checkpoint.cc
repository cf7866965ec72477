// rtft._core.CheckpointEngine, restore and the readers of include/rtft/checkpoint.h. Every call
// that waits releases the GIL; the engine keeps each version's State (and so the memory its
// tensors describe) alive until that version is captured.
#include <pybind11/stl.h>

#include <deque>
#include <utility>

#include "python/bind.h"
#include "python/state.h"
#include "rtft/checkpoint.h"

namespace rtft::python {

namespace {

using std::chrono::milliseconds;

class PyEngine {
 public:
  explicit PyEngine(const CheckpointOptions& options) {
    StatusOr<std::unique_ptr<CheckpointEngine>> engine = Status::Internal("not created");
    {
      py::gil_scoped_release nogil;
      engine = CheckpointEngine::Create(options);
    }
    engine_ = Unwrap(std::move(engine));
  }
  ~PyEngine() { Close(); }

  void Checkpoint(uint64_t version, const std::shared_ptr<PyState>& state) {
    if (!state) throw py::type_error("checkpoint: state is None");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = Engine()->Checkpoint(version, *state);
    }
    state->ThrowFor(s);
    in_flight_.emplace_back(version, state);
    Release();
  }
  void Wait(uint64_t version, const std::optional<double>& timeout, bool persisted) {
    CheckpointEngine* e = Engine();
    const auto ms = Timeout(timeout, persisted ? "wait_persisted" : "wait_captured");
    Status s;
    {
      py::gil_scoped_release nogil;
      if (persisted) {
        s = ms ? e->WaitPersisted(version, *ms) : e->WaitPersisted(version);
      } else {
        s = ms ? e->WaitCaptured(version, *ms) : e->WaitCaptured(version);
      }
    }
    Release();
    ThrowIfError(s);
  }
  void PollError() { ThrowIfError(Engine()->PollError()); }
  py::dict Stats(uint64_t version) {
    CheckpointStats s = Unwrap(Engine()->Stats(version));
    py::dict d;
    d["version"] = s.version;
    d["tensor_bytes"] = s.tensor_bytes;
    d["object_bytes"] = s.object_bytes;
    d["tensors"] = s.tensors;
    d["early_bytes"] = s.early_bytes;
    d["checkpoint_call_s"] = s.checkpoint_call_s;
    d["capture_s"] = s.capture_s;
    d["persist_s"] = s.persist_s;
    d["commit_s"] = s.commit_s;
    d["direct_io"] = s.direct_io;
    d["io_backend"] = s.io_backend;
    return d;
  }
  // Waits for every version in flight (as the engine's destructor does), then lets the states go.
  void Close() {
    if (!engine_) return;
    {
      py::gil_scoped_release nogil;
      engine_.reset();
    }
    in_flight_.clear();
  }
  const CheckpointOptions& options() { return Engine()->options(); }

 private:
  CheckpointEngine* Engine() {
    if (!engine_) throw StatusError(Status::FailedPrecondition("the checkpoint engine is closed"));
    return engine_.get();
  }
  // Lets go of the states of the versions no copy reads any more (captured, failed, or
  // forgotten by the engine). Versions are captured in order.
  void Release() {
    while (!in_flight_.empty()) {
      Status s = engine_->WaitCaptured(in_flight_.front().first, milliseconds(0));
      if (s.code() == StatusCode::kDeadlineExceeded) return;
      in_flight_.pop_front();
    }
  }

  std::unique_ptr<CheckpointEngine> engine_;
  std::deque<std::pair<uint64_t, std::shared_ptr<PyState>>> in_flight_;
};

std::unique_ptr<PyEngine> MakeEngine(const std::string& dir, int rank, int world_size,
                                     uint64_t pool_bytes, uint64_t chunk_bytes, int capture_threads,
                                     int flush_threads, const std::string& io_backend,
                                     std::optional<bool> direct_io,
                                     std::optional<int> keep_versions,
                                     std::optional<double> commit_timeout,
                                     std::optional<double> wait_timeout, bool pin_pool,
                                     uint64_t write_id) {
  if (dir.empty()) throw StatusError(Status::InvalidArgument("CheckpointEngine: dir is empty"));
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw StatusError(Status::InvalidArgument("CheckpointEngine: needs 0 <= rank < world_size"));
  if (capture_threads < 0 || flush_threads < 0 || (keep_versions && *keep_versions < 0))
    throw StatusError(
        Status::InvalidArgument("CheckpointEngine: thread and version counts are >= 0"));
  CheckpointOptions o;
  o.dir = dir;
  o.rank = rank;
  o.world_size = world_size;
  o.pool_bytes = pool_bytes;
  o.chunk_bytes = chunk_bytes;
  o.capture_threads = capture_threads;
  o.flush_threads = flush_threads;
  o.io_backend = io_backend;
  o.direct_io = direct_io;
  o.keep_versions = keep_versions;
  o.commit_timeout = Timeout(commit_timeout, "commit_timeout").value_or(milliseconds(0));
  o.wait_timeout = Timeout(wait_timeout, "wait_timeout").value_or(milliseconds(0));
  o.pin_pool = pin_pool;
  o.write_id = write_id;
  return std::make_unique<PyEngine>(o);
}

void Restore(const std::string& dir, const std::shared_ptr<PyState>& state,
             std::optional<uint64_t> version, bool verify_checksums, uint64_t staging_bytes,
             std::optional<int> rank) {
  if (!state) throw py::type_error("restore: state is None");
  if (rank && *rank < 0) throw py::value_error("restore: rank must be 0 or more");
  RestoreOptions o;
  o.version = version;
  o.rank = rank;
  o.verify_checksums = verify_checksums;
  if (staging_bytes > 0) o.staging_bytes = staging_bytes;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = rtft::Restore(dir, o, *state);
  }
  state->ThrowFor(s);
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  py::class_<PyEngine>(m, "CheckpointEngine",
                       "The lazy asynchronous checkpoint engine (include/rtft/checkpoint.h)")
      .def(py::init(&MakeEngine), py::arg("dir"), py::arg("rank") = 0, py::arg("world_size") = 1,
           py::arg("pool_bytes") = 0, py::arg("chunk_bytes") = 0, py::arg("capture_threads") = 0,
           py::arg("flush_threads") = 0, py::arg("io_backend") = "",
           py::arg("direct_io") = py::none(), py::arg("keep_versions") = py::none(),
           py::arg("commit_timeout") = py::none(), py::arg("wait_timeout") = py::none(),
           py::arg("pin_pool") = true, py::arg("write_id") = 0)
      .def("checkpoint", &PyEngine::Checkpoint, py::arg("version"), py::arg("state"),
           "Starts a lazy checkpoint of `state` as `version` and returns at once; the memory "
           "must not change until wait_captured(version) returns")
      .def(
          "wait_captured",
          [](PyEngine& e, uint64_t v, std::optional<double> t) { e.Wait(v, t, false); },
          py::arg("version"), py::arg("timeout") = py::none(),
          "Blocks until every byte of `version` is in host memory (the fence before an update)")
      .def(
          "wait_persisted",
          [](PyEngine& e, uint64_t v, std::optional<double> t) { e.Wait(v, t, true); },
          py::arg("version"), py::arg("timeout") = py::none(),
          "Blocks until `version` is durable (and committed, on rank 0); versions in flight "
          "together may complete in any order")
      .def("poll_error", &PyEngine::PollError, "Raises the first background error, if any")
      .def("stats", &PyEngine::Stats, py::arg("version"))
      .def("close", &PyEngine::Close, "Waits for the versions in flight and stops the engine")
      .def_property_readonly("dir", [](PyEngine& e) { return e.options().dir; })
      .def_property_readonly("rank", [](PyEngine& e) { return e.options().rank; })
      .def_property_readonly("world_size", [](PyEngine& e) { return e.options().world_size; });
  py::class_<VersionMarks>(m, "VersionMarks")
      .def_readonly("checked", &VersionMarks::checked)
      .def_readonly("agreed", &VersionMarks::agreed)
      .def_readonly("replayed", &VersionMarks::replayed)
      .def("__repr__", [](const VersionMarks& k) {
        const auto b = [](bool v) { return v ? std::string("True") : std::string("False"); };
        return "VersionMarks(checked=" + b(k.checked) + ", agreed=" + b(k.agreed) +
               ", replayed=" + b(k.replayed) + ")";
      });
  py::class_<VersionInfo>(m, "VersionInfo")
      .def_readonly("version", &VersionInfo::version)
      .def_readonly("world_size", &VersionInfo::world_size)
      .def_readonly("complete", &VersionInfo::complete)
      .def_readonly("path", &VersionInfo::path)
      .def_readonly("marks", &VersionInfo::marks)
      .def("__repr__", [](const VersionInfo& v) {
        return "VersionInfo(version=" + std::to_string(v.version) +
               ", world_size=" + std::to_string(v.world_size) +
               ", complete=" + (v.complete ? "True" : "False") + ")";
      });
  m.def("restore", &Restore, py::arg("dir"), py::arg("state"), py::arg("version") = py::none(),
        py::arg("verify_checksums") = true, py::arg("staging_bytes") = 0,
        py::arg("rank") = py::none(),
        "Fills every tensor and object of `state` from the checkpoint under `dir` (LATEST unless "
        "`version` is given), verifying checksums and resharding shards; objects from `rank`'s "
        "file where it has them");
  m.def(
      "list_versions",
      [](const std::string& dir) {
        StatusOr<std::vector<VersionInfo>> v = Status::Internal("");
        {
          py::gil_scoped_release nogil;
          v = ListVersions(dir);
        }
        return Unwrap(std::move(v));
      },
      py::arg("dir"), "Every version directory under `dir`, oldest first, complete or not");
  m.def(
      "latest_version",
      [](const std::string& dir) -> std::optional<uint64_t> {
        StatusOr<uint64_t> v = Status::Internal("");
        {
          py::gil_scoped_release nogil;
          v = LatestVersion(dir);
        }
        if (!v.ok() && v.status().code() == StatusCode::kNotFound) return std::nullopt;
        return Unwrap(std::move(v));
      },
      py::arg("dir"), "The version LATEST names, or None when nothing was committed");
  m.def("verify_version", [](const std::string& dir, uint64_t version) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = VerifyVersion(dir, version);
    }
    ThrowIfError(s);
  });
}

}  // namespace rtft::python
