#include "checkpoint/engine.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <new>

#include "checkpoint/layout/manifest.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint/pool/pool_size.h"
#include "core/check.h"
#include "core/checksum.h"
#include "core/logging.h"
#include "core/params.h"

namespace rtft {

using internal::Clock;
using internal::Engine;
using internal::Seconds;
using internal::Version;
using internal::VersionStage;

namespace {
constexpr size_t kVersionsRemembered = 64;
}  // namespace

StatusOr<CheckpointOptions> ResolveCheckpointOptions(const CheckpointOptions& in) {
  CheckpointOptions o = in;
  if (o.dir.empty()) return Status::InvalidArgument("checkpoint directory is empty");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " of world size " +
                                   std::to_string(o.world_size) + " is not valid");
  if (o.chunk_bytes == 0) {
    RTFT_ASSIGN_OR_RETURN(o.chunk_bytes, ParamBytes(Param::kCkptChunkBytes));
  }
  if (o.capture_threads <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t n, ParamInt(Param::kCkptCaptureThreads));
    o.capture_threads = static_cast<int>(n);
  }
  if (o.flush_threads <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t n, ParamInt(Param::kCkptFlushThreads));
    o.flush_threads = static_cast<int>(n);
  }
  if (o.pool_bytes == 0) {
    RTFT_ASSIGN_OR_RETURN(o.pool_bytes, ParamBytes(Param::kCkptPoolBytes));
  }
  if (o.pool_bytes == 0 && o.chunk_bytes > 0) {
    const PoolSizing sizing = DefaultPoolSize(o.chunk_bytes, o.flush_threads);
    o.pool_bytes = sizing.bytes;
    RTFT_LOG(kInfo, kLogCkpt) << "pinned pool: " << FormatBytes(sizing.bytes) << " by default ("
                              << FormatBytes(sizing.host_bytes) << " of host memory, "
                              << sizing.local_ranks << " local rank(s) from "
                              << sizing.local_ranks_from
                              << ", an eighth each; RTFT_CKPT_POOL_BYTES chooses another size)";
  }
  if (o.io_backend.empty()) o.io_backend = ParamString(Param::kCkptIoBackend);
  if (o.io_depth <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t n, ParamInt(Param::kCkptIoDepth));
    o.io_depth = static_cast<int>(n);
  }
  if (!o.direct_io) {
    RTFT_ASSIGN_OR_RETURN(o.direct_io, ParamBool(Param::kCkptDirectIo));
  }
  if (!o.keep_versions) {
    RTFT_ASSIGN_OR_RETURN(int64_t n, ParamInt(Param::kCkptKeepVersions));
    o.keep_versions = static_cast<int>(n);
  }
  if (o.commit_timeout.count() <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t ms, ParamInt(Param::kCkptCommitTimeoutMs));
    o.commit_timeout = std::chrono::milliseconds(ms);
  }
  if (o.wait_timeout.count() <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t ms, ParamInt(Param::kCkptWaitTimeoutMs));
    o.wait_timeout = std::chrono::milliseconds(ms);
  }

  if (o.chunk_bytes < kDirectIoAlignment || o.chunk_bytes % kDirectIoAlignment != 0)
    return Status::InvalidArgument("chunk size " + std::to_string(o.chunk_bytes) +
                                   " must be a positive multiple of 4096 (RTFT_CKPT_CHUNK_BYTES)");
  if (o.chunk_bytes > PinnedPool::kSegmentBytes)
    return Status::InvalidArgument("chunk size " + FormatBytes(o.chunk_bytes) + " exceeds " +
                                   FormatBytes(PinnedPool::kSegmentBytes) +
                                   " (RTFT_CKPT_CHUNK_BYTES)");
  if (o.pool_bytes < o.chunk_bytes)
    return Status::InvalidArgument("pinned pool (" + FormatBytes(o.pool_bytes) +
                                   ", RTFT_CKPT_POOL_BYTES) must hold at least one chunk (" +
                                   FormatBytes(o.chunk_bytes) + ", RTFT_CKPT_CHUNK_BYTES)");
  if (o.capture_threads > 256 || o.flush_threads > 256 || o.io_depth > 4096)
    return Status::InvalidArgument("capture/flush threads or I/O depth out of range");
  if (*o.keep_versions < 0) return Status::InvalidArgument("keep_versions must be 0 or more");
  return o;
}

StatusOr<std::unique_ptr<CheckpointEngine>> CheckpointEngine::Create(
    const CheckpointOptions& options) {
  RTFT_ASSIGN_OR_RETURN(CheckpointOptions resolved, ResolveCheckpointOptions(options));
  IoBackendOptions io_options;
  io_options.kind = resolved.io_backend;
  io_options.queue_depth = resolved.io_depth;
  RTFT_ASSIGN_OR_RETURN(auto io, CreateIoBackend(io_options));
  return CreateCheckpointEngine(resolved, std::move(io));
}

CheckpointEngine::~CheckpointEngine() = default;

StatusOr<std::unique_ptr<CheckpointEngine>> CreateCheckpointEngine(const CheckpointOptions& options,
                                                                   std::unique_ptr<IoBackend> io) {
  RTFT_ASSIGN_OR_RETURN(CheckpointOptions resolved, ResolveCheckpointOptions(options));
  // Fail at start, not at the first flush, when the directory cannot be written.
  RTFT_RETURN_IF_ERROR(io->CreateDirs(resolved.dir).Annotate("checkpoint directory"));
  {
    const std::string probe =
        JoinPath(resolved.dir,
                 ".rtft-probe-" + std::to_string(resolved.rank) + "-" + std::to_string(getpid()));
    auto file = io->Open(probe, OpenOptions{OpenMode::kCreate, false});
    if (!file.ok())
      return file.status().Annotate("checkpoint directory " + resolved.dir + " is not writable");
    (void)(*file)->Close();
    (void)io->Remove(probe);
  }
  RTFT_ASSIGN_OR_RETURN(auto pool, PinnedPool::Create(resolved.pool_bytes, resolved.pin_pool));
  auto engine = std::make_unique<Engine>(resolved, std::move(io), std::move(pool));
  RTFT_RETURN_IF_ERROR(engine->Start());
  return std::unique_ptr<CheckpointEngine>(std::move(engine));
}

namespace internal {

Engine::Engine(CheckpointOptions options, std::unique_ptr<IoBackend> io,
               std::unique_ptr<PinnedPool> pool)
    : options_(std::move(options)), io_(std::move(io)), pool_(std::move(pool)) {}

Status Engine::Start() {
  capture_pool_ = std::make_unique<ThreadPool>(options_.capture_threads, "rtft-ckpt-copy");
  RTFT_ASSIGN_OR_RETURN(capture_thread_, Thread::Start("rtft-ckpt-capt", [this] {
                          RunLoop("capture thread", &Engine::CaptureLoop);
                        }));
  RTFT_ASSIGN_OR_RETURN(completion_thread_, Thread::Start("rtft-ckpt-done", [this] {
                          RunLoop("completion thread", &Engine::CompletionLoop);
                        }));
  RTFT_ASSIGN_OR_RETURN(file_thread_, Thread::Start("rtft-ckpt-file", [this] {
                          RunLoop("file thread", &Engine::FileLoop);
                        }));
  RTFT_ASSIGN_OR_RETURN(commit_thread_, Thread::Start("rtft-ckpt-commit", [this] {
                          RunLoop("commit thread", &Engine::CommitLoop);
                        }));
  for (int i = 0; i < options_.flush_threads; ++i) {
    RTFT_ASSIGN_OR_RETURN(Thread flush, Thread::Start("rtft-ckpt-flush", [this] {
                            RunLoop("flush thread", &Engine::FlushLoop);
                          }));
    flush_threads_.push_back(std::move(flush));
  }
  RTFT_LOG(kInfo, kLogCkpt) << "checkpoint engine: rank " << options_.rank << "/"
                            << options_.world_size << ", dir " << options_.dir << ", io "
                            << io_->name() << ", pool " << FormatBytes(pool_->capacity())
                            << ", chunk " << FormatBytes(options_.chunk_bytes) << ", "
                            << options_.flush_threads << " flush threads";
  return Status::Ok();
}

Engine::~Engine() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] {
      if (!loop_error_.ok()) return true;  // a dead loop finishes nothing
      for (const auto& [n, v] : versions_)
        if (!v->done()) return false;
      return true;
    });
    stopping_ = true;
  }
  cv_.notify_all();
  pool_->Shutdown();
  capture_thread_.Join();
  completion_thread_.Join();
  for (auto& t : flush_threads_) t.Join();
  file_thread_.Join();
  commit_thread_.Join();
  capture_pool_.reset();
}

StatusOr<DeviceCopier*> Engine::Copier(int device) {
  std::lock_guard<std::mutex> lock(copier_mu_);
  auto it = copiers_.find(device);
  if (it == copiers_.end()) {
    RTFT_ASSIGN_OR_RETURN(auto copier, CreateDeviceCopier(device));
    it = copiers_.emplace(device, std::move(copier)).first;
  }
  return it->second.get();
}

StatusOr<std::shared_ptr<Version>> Engine::Plan(uint64_t version, const StateProvider& state) {
  StateDescription desc;
  RTFT_RETURN_IF_ERROR(state.Describe(&desc));
  RTFT_RETURN_IF_ERROR(ValidateDescription(desc));
  auto v = std::make_shared<Version>();
  v->version = version;
  v->stats.version = version;
  v->stats.io_backend = io_->name();
  // Objects are small and often change during the next forward pass (RNG state), so they are
  // serialized here, at the moment of the call; their bytes are written with the skeleton.
  for (const ObjectDesc& o : desc.objects) {
    if (!o.serialize) return Status::InvalidArgument("object '" + o.name + "' has no serializer");
    StatusOr<std::string> bytes = o.serialize();
    if (!bytes.ok()) return bytes.status().Annotate("serializing object '" + o.name + "'");
    v->stats.object_bytes += bytes->size();
    v->object_blobs.push_back(ObjectBlob{o.name, std::move(*bytes)});
  }
  for (TensorDesc& t : desc.tensors) {
    if (t.memory == MemoryKind::kDevice && t.bytes() > 0) {
      RTFT_RETURN_IF_ERROR(Copier(t.device).status());
      RTFT_RETURN_IF_ERROR(CheckDevicePointer(t.data, t.device, "tensor '" + t.name + "'"));
    }
    if (t.changed_in_compute && t.bytes() > 0) RTFT_RETURN_IF_ERROR(CopyEarly(v.get(), &t));
  }
  v->units = PlanCaptureUnits(desc.tensors, options_.chunk_bytes);
  for (TensorDesc& t : desc.tensors) {
    TensorState ts;
    ts.xxh3.assign(ChunkCount(t.bytes(), options_.chunk_bytes), 0);
    if (t.bytes() == 0) ts.xxh3[0] = Xxh3("", 0);
    v->stats.tensor_bytes += t.bytes();
    ts.desc = std::move(t);
    v->tensors.push_back(std::move(ts));
  }
  v->stats.tensors = v->tensors.size();
  v->final_path = RankFilePath(options_.dir, version, options_.rank);
  v->tmp_path = TempPath(v->final_path);
  return v;
}

// A tensor that the caller's next compute changes (a module buffer that forward updates) is
// copied here, before Checkpoint() returns, into host memory the version owns; the capture reads
// that copy. A device tensor is copied on the copier's stream and waited for: as for the other
// device tensors, the caller has finished the work that wrote it (docs/checkpoint.md).
Status Engine::CopyEarly(Version* v, TensorDesc* t) {
  const uint64_t bytes = t->bytes();
  std::unique_ptr<char[]> copy(new (std::nothrow) char[bytes]);
  if (!copy)
    return Status::ResourceExhausted("no host memory for the early copy of tensor '" + t->name +
                                     "' (" + std::to_string(bytes) + " bytes)");
  if (t->memory == MemoryKind::kHost) {
    std::memcpy(copy.get(), t->data, bytes);
  } else {
    RTFT_ASSIGN_OR_RETURN(DeviceCopier * copier, Copier(t->device));
    RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> ticket,
                          copier->CopyToHost({CopyPiece{copy.get(), t->data, bytes}}));
    RTFT_RETURN_IF_ERROR(
        ticket->Wait().Annotate("copying tensor '" + t->name + "' inside Checkpoint()"));
  }
  t->data = copy.get();
  t->memory = MemoryKind::kHost;
  t->device = 0;
  t->coalesce_group = -1;
  v->early_copies.push_back(std::move(copy));
  v->stats.early_bytes += bytes;
  return Status::Ok();
}

Status Engine::Checkpoint(uint64_t version, const StateProvider& state, const VersionMarks& marks) {
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::FailedPrecondition("checkpoint engine is shutting down");
    if (!loop_error_.ok()) return loop_error_;
    if (any_version_ && version <= last_version_)
      return Status::InvalidArgument(
          "checkpoint versions must increase: " + std::to_string(version) + " after " +
          std::to_string(last_version_));
  }
  RTFT_ASSIGN_OR_RETURN(std::shared_ptr<Version> v, Plan(version, state));
  v->start = start;
  v->marks = marks;
  v->marks.agreed = marks.checked && marks.agreed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_version_ = version;
    any_version_ = true;
    versions_[version] = v;
    while (versions_.size() > kVersionsRemembered && versions_.begin()->second->done())
      versions_.erase(versions_.begin());
    capture_queue_.push_back(v);
    file_queue_.emplace_back(FileTask::kCreate, v);
    v->stats.checkpoint_call_s = Seconds(Clock::now() - start);
  }
  cv_.notify_all();
  return Status::Ok();
}

Status Engine::WaitFor(uint64_t version, std::chrono::milliseconds timeout, bool persisted) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = versions_.find(version);
  if (it == versions_.end())
    return Status::NotFound("version " + std::to_string(version) +
                            " was not checkpointed by this engine");
  std::shared_ptr<Version> v = it->second;
  // Until the version is captured, copies may still be reading the caller's memory: not even a
  // failed version returns before that, or the caller could free memory a copy still reads.
  const bool done = cv_.wait_for(lock, timeout, [&] {
    if (!loop_error_.ok()) return true;
    if (!v->captured()) return false;
    return !v->error.ok() || !persisted || v->done();
  });
  if (!v->error.ok() && v->captured()) return v->error;
  if (!loop_error_.ok() && !(persisted ? v->done() : v->captured())) return loop_error_;
  if (!done)
    return Status::DeadlineExceeded("version " + std::to_string(version) + " was not " +
                                    (persisted ? "persisted" : "captured") + " within " +
                                    std::to_string(timeout.count()) + " ms");
  return Status::Ok();
}

Status Engine::WaitCaptured(uint64_t version) {
  return WaitFor(version, options_.wait_timeout, false);
}
Status Engine::WaitCaptured(uint64_t version, std::chrono::milliseconds timeout) {
  return WaitFor(version, timeout, false);
}
Status Engine::WaitPersisted(uint64_t version) {
  return WaitFor(version, options_.wait_timeout, true);
}
Status Engine::WaitPersisted(uint64_t version, std::chrono::milliseconds timeout) {
  return WaitFor(version, timeout, true);
}

Status Engine::PollError() {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void Engine::Abandon() {
  abandoned_ = true;
  // A prune that runs ends first: once this returns, every version on disk stays until the next
  // engine prunes.
  std::lock_guard<std::mutex> lock(prune_mu_);
}

StatusOr<CheckpointStats> Engine::Stats(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = versions_.find(version);
  if (it == versions_.end())
    return Status::NotFound("no statistics for version " + std::to_string(version));
  return it->second->stats;
}

void Engine::FailLocked(Version* v, const Status& status) {
  if (!v->error.ok()) return;
  v->error = status.Annotate("checkpoint version " + std::to_string(v->version));
  RTFT_LOG(kError, kLogCkpt) << v->error.ToString();
  if (first_error_.ok()) first_error_ = v->error;
}

void Engine::AdvanceLocked(const std::shared_ptr<Version>& v) {
  const size_t n = v->units.size();
  if (v->stage == VersionStage::kCapturing && v->units_captured == n) {
    if (v->error.ok()) v->stats.capture_s = Seconds(Clock::now() - v->start);
    SetStageLocked(v.get(), VersionStage::kCaptured);
  }
  if (v->stage == VersionStage::kCaptured && v->units_released == n && v->skeleton_done) {
    SetStageLocked(v.get(), VersionStage::kFinalizing);
    file_queue_.emplace_back(FileTask::kFinalize, v);
  }
  cv_.notify_all();
}

void Engine::SetStageLocked(Version* v, VersionStage stage) {
  RTFT_CHECK(stage > v->stage);
  RTFT_LOG(kTrace, kLogCkpt) << "version " << v->version << ": " << VersionStageName(v->stage)
                             << " -> " << VersionStageName(stage);
  v->stage = stage;
  cv_.notify_all();
}

const char* VersionStageName(VersionStage stage) {
  switch (stage) {
    case VersionStage::kCapturing:
      return "capturing";
    case VersionStage::kCaptured:
      return "captured";
    case VersionStage::kFinalizing:
      return "finalizing";
    case VersionStage::kCommitting:
      return "committing";
    case VersionStage::kDone:
      return "done";
  }
  return "?";
}

}  // namespace internal
}  // namespace rtft
