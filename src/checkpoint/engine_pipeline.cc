// The checkpoint engine's background threads. None of them throws or aborts on an I/O or CUDA
// error: the first error of a version is recorded and reported by WaitCaptured/WaitPersisted.
// Every piece of work runs under RunGuarded and every loop under RunLoop, so that not even an
// exception (a bug, a throwing library) ends the process.
#include <cstring>

#include "checkpoint/commit/commit.h"
#include "checkpoint/engine.h"
#include "checkpoint/layout/naming.h"
#include "core/checksum.h"
#include "core/fault_point.h"
#include "core/logging.h"

namespace rtft::internal {
// ---- capture ---------------------------------------------------------------------------------

void Engine::RunLoop(const char* name, void (Engine::*loop)()) {
  Status status = RunGuarded(std::string("the checkpoint engine's ") + name, [&] {
    (this->*loop)();
    return Status::Ok();
  });
  if (!status.ok()) RecordLoopFailure(status);
}

void Engine::RecordLoopFailure(const Status& status) {
  // Only reached when an exception escaped a loop's own bookkeeping (allocation failure):
  // logging and recording must not throw again, so nothing here allocates beyond the Status.
  try {
    std::lock_guard<std::mutex> lock(mu_);
    RTFT_LOG(kError, kLogCkpt) << status.ToString() << "; the checkpoint engine stops";
    if (loop_error_.ok()) loop_error_ = status;
    if (first_error_.ok()) first_error_ = status;
  } catch (...) {
  }
  cv_.notify_all();
}

void Engine::CaptureLoop() {
  for (;;) {
    std::shared_ptr<Version> v;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !capture_queue_.empty(); });
      if (capture_queue_.empty()) return;
      v = capture_queue_.front();
      capture_queue_.pop_front();
    }
    CaptureVersion(v);
  }
}

void Engine::CaptureVersion(const std::shared_ptr<Version>& v) {
  FaultPoint("ckpt.capture_begin");
  const size_t n = v->units.size();
  for (size_t i = 0; i < n; ++i) {
    const PlannedUnit& unit = v->units[i];
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = v->error;
    }
    StatusOr<PoolSpan> span =
        status.ok() ? pool_->Allocate(unit.span_bytes, options_.wait_timeout) : status;
    if (!span.ok()) {
      // Nothing more of this version is copied; the units left count as done.
      std::lock_guard<std::mutex> lock(mu_);
      FailLocked(v.get(), span.status());
      v->units_captured += n - i;
      v->units_released += n - i;
      AdvanceLocked(v);
      return;
    }
    // A copy that could not start still hands its span to a flush thread, which releases it.
    Status started = RunGuarded("the checkpoint engine\'s capture thread",
                                [&] { return StartCopy(v, i, *span); });
    if (!started.ok()) OnUnitCaptured(v, i, *span, started);
    FaultPoint("ckpt.capture");
  }
}

Status Engine::StartCopy(const std::shared_ptr<Version>& v, size_t i, const PoolSpan& span) {
  const PlannedUnit& unit = v->units[i];
  if (unit.memory == MemoryKind::kHost) {
    capture_pool_->Submit([this, v, i, span] {
      Status copied = RunGuarded("the checkpoint engine\'s capture pool", [&] {
        for (const PlannedPiece& p : v->units[i].pieces) {
          const char* src =
              static_cast<const char*>(v->tensors[p.tensor].desc.data) + p.tensor_offset;
          std::memcpy(span.data + p.span_offset, src, p.bytes);
        }
        return Status::Ok();
      });
      Status handed = RunGuarded("the checkpoint engine\'s capture pool", [&] {
        OnUnitCaptured(v, i, span, copied);
        return Status::Ok();
      });
      if (!handed.ok()) RecordLoopFailure(handed);
    });
    return Status::Ok();
  }
  std::vector<CopyPiece> pieces;
  for (const PlannedPiece& p : unit.pieces) {
    const char* src = static_cast<const char*>(v->tensors[p.tensor].desc.data) + p.tensor_offset;
    pieces.push_back(CopyPiece{span.data + p.span_offset, src, p.bytes});
  }
  RTFT_ASSIGN_OR_RETURN(DeviceCopier * copier, Copier(unit.device));
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<CopyTicket> ticket, copier->CopyToHost(pieces));
  {
    std::lock_guard<std::mutex> lock(mu_);
    device_queue_.push_back(DeviceWait{v, i, span, std::move(ticket)});
  }
  cv_.notify_all();
  return Status::Ok();
}

void Engine::OnUnitCaptured(const std::shared_ptr<Version>& v, size_t unit, PoolSpan span,
                            Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok()) FailLocked(v.get(), status);
  ++v->units_captured;
  flush_queue_.push_back(FlushItem{v, unit, span, !v->error.ok()});
  AdvanceLocked(v);
}

void Engine::CompletionLoop() {
  for (;;) {
    DeviceWait wait;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !device_queue_.empty(); });
      if (device_queue_.empty()) return;
      wait = std::move(device_queue_.front());
      device_queue_.pop_front();
    }
    Status copied = RunGuarded("the checkpoint engine\'s completion thread",
                               [&] { return wait.ticket->Wait(); });
    OnUnitCaptured(wait.version, wait.unit, wait.span, copied);
  }
}

// ---- flush -----------------------------------------------------------------------------------

void Engine::FlushLoop() {
  // This thread's open files per version: O_DIRECT for aligned bodies, buffered for the rest.
  // They are closed as soon as the version has no units left, so no descriptor outlives it.
  using Files = std::pair<std::unique_ptr<File>, std::unique_ptr<File>>;
  std::map<Version*, Files> files;
  std::map<Version*, std::shared_ptr<Version>> holders;
  auto drained = [](const std::shared_ptr<Version>& v) {
    return v->units_released == v->units.size();
  };
  for (;;) {
    FlushItem item;
    bool have_item = false;
    bool skip = false;
    std::vector<Files> to_close;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        if (stopping_ || !flush_queue_.empty()) return true;
        for (const auto& held : holders)
          if (drained(held.second)) return true;
        return false;
      });
      for (auto it = holders.begin(); it != holders.end();) {
        if (drained(it->second)) {
          to_close.push_back(std::move(files[it->first]));
          files.erase(it->first);
          it = holders.erase(it);
        } else {
          ++it;
        }
      }
      if (!flush_queue_.empty()) {
        item = std::move(flush_queue_.front());
        flush_queue_.pop_front();
        Version* v = item.version.get();
        cv_.wait(lock, [v] { return v->skeleton_done; });
        skip = item.skip || !v->error.ok();
        have_item = true;
      } else if (stopping_) {
        return;
      }
    }
    to_close.clear();  // closes outside the lock
    if (!have_item) continue;
    Version* v = item.version.get();
    Status status;
    if (!skip) {
      holders[v] = item.version;
      status = RunGuarded("the checkpoint engine\'s flush thread",
                          [&] { return WriteUnit(v, v->units[item.unit], item.span, &files); });
    }
    pool_->Release(item.span);
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) FailLocked(v, status);
    ++v->units_released;
    AdvanceLocked(item.version);
  }
}

Status Engine::WriteUnit(
    Version* v, const PlannedUnit& unit, const PoolSpan& span,
    std::map<Version*, std::pair<std::unique_ptr<File>, std::unique_ptr<File>>>* files) {
  auto& [direct, buffered] = (*files)[v];
  if (!direct) {
    RTFT_ASSIGN_OR_RETURN(
        direct, io_->Open(v->tmp_path, OpenOptions{OpenMode::kReadWrite, *options_.direct_io}));
    if (direct->direct()) {
      RTFT_ASSIGN_OR_RETURN(buffered,
                            io_->Open(v->tmp_path, OpenOptions{OpenMode::kReadWrite, false}));
    }
  }
  const bool use_direct = direct->direct();
  if (use_direct) v->direct_io = true;
  std::vector<IoRequest> aligned, rest;
  for (const PlannedPiece& p : unit.pieces) {
    TensorState& t = v->tensors[p.tensor];
    char* buf = span.data + p.span_offset;
    // Each piece is exactly one checksum chunk of its tensor (capture_plan.h).
    t.xxh3[p.tensor_offset / options_.chunk_bytes] = Xxh3(buf, p.bytes);
    const uint64_t offset = t.file_offset + p.tensor_offset;
    uint64_t body = 0;
    if (use_direct && offset % kDirectIoAlignment == 0 &&
        reinterpret_cast<uintptr_t>(buf) % kDirectIoAlignment == 0)
      body = p.bytes / kDirectIoAlignment * kDirectIoAlignment;
    if (body > 0) aligned.push_back(IoRequest{offset, buf, body});
    // The unaligned tail goes through the page cache: O_DIRECT would write past the dataset.
    if (p.bytes > body) rest.push_back(IoRequest{offset + body, buf + body, p.bytes - body});
  }
  MergeAdjacent(&aligned);
  MergeAdjacent(&rest);
  SplitLarge(&aligned, kWriteRequestBytes);
  if (!aligned.empty()) RTFT_RETURN_IF_ERROR(direct->Write(aligned));
  if (!rest.empty()) RTFT_RETURN_IF_ERROR((buffered ? buffered : direct)->Write(rest));
  FaultPoint("ckpt.flush");
  return Status::Ok();
}

// ---- files and commit ------------------------------------------------------------------------

void Engine::FileLoop() {
  for (;;) {
    std::pair<FileTask, std::shared_ptr<Version>> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !file_queue_.empty(); });
      if (file_queue_.empty()) return;
      task = file_queue_.front();
      file_queue_.pop_front();
    }
    Version* v = task.second.get();
    if (task.first == FileTask::kCreate) {
      Status status =
          RunGuarded("the checkpoint engine\'s file thread", [&] { return CreateFile(v); });
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok()) FailLocked(v, status);
      v->skeleton_done = true;
      AdvanceLocked(task.second);
      continue;
    }
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = v->error;
    }
    if (status.ok())
      status =
          RunGuarded("the checkpoint engine\'s file thread", [&] { return FinalizeVersion(v); });
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) {
      FailLocked(v, status);
      // No partial file is left behind under the final name; the temporary one goes too.
      (void)RunGuarded("the checkpoint engine\'s file thread",
                       [&] { return io_->Remove(v->tmp_path); });
      SetStageLocked(v, VersionStage::kDone);
    } else if (options_.rank == 0) {
      SetStageLocked(v, VersionStage::kCommitting);
      commit_queue_.push_back(task.second);
    } else {
      SetStageLocked(v, VersionStage::kDone);
    }
  }
}

Status Engine::CreateFile(Version* v) {
  const std::string dir = VersionDir(options_.dir, v->version);
  RTFT_RETURN_IF_ERROR(io_->CreateDirs(dir));
  RTFT_RETURN_IF_ERROR(io_->SyncDir(options_.dir));
  std::vector<DatasetSpec> specs;
  specs.reserve(v->tensors.size());
  for (const TensorState& t : v->tensors)
    specs.push_back(DatasetSpec{t.desc.name, t.desc.dtype, t.desc.shape, t.desc.shard});
  RTFT_ASSIGN_OR_RETURN(
      std::vector<uint64_t> offsets,
      CreateSkeleton(io_.get(), v->tmp_path, specs, v->object_blobs, &v->object_entries));
  for (size_t i = 0; i < offsets.size(); ++i) v->tensors[i].file_offset = offsets[i];
  FaultPoint("ckpt.skeleton");
  return Status::Ok();
}

Status Engine::FinalizeVersion(Version* v) {
  FileManifest m;
  m.version = v->version;
  m.rank = options_.rank;
  m.world_size = options_.world_size;
  m.chunk_bytes = options_.chunk_bytes;
  m.created_unix_ms = NowUnixMs();
  m.write_id = options_.write_id;
  for (const TensorState& t : v->tensors) {
    m.tensors.push_back(TensorEntry{t.desc.name, t.desc.dtype, t.desc.shape, t.desc.shard,
                                    t.file_offset, t.desc.bytes(), t.xxh3});
  }
  m.objects = v->object_entries;
  m.marks = v->marks;
  RTFT_RETURN_IF_ERROR(FinalizeFile(io_.get(), v->tmp_path, {}, &m));
  FaultPoint("ckpt.manifest_written");
  {
    RTFT_ASSIGN_OR_RETURN(auto file,
                          io_->Open(v->tmp_path, OpenOptions{OpenMode::kReadWrite, false}));
    RTFT_RETURN_IF_ERROR(file->Sync());
    RTFT_RETURN_IF_ERROR(file->Close());
  }
  FaultPoint("ckpt.synced");
  RTFT_RETURN_IF_ERROR(io_->Rename(v->tmp_path, v->final_path));
  FaultPoint("ckpt.renamed");
  RTFT_RETURN_IF_ERROR(io_->SyncDir(DirName(v->final_path)));
  std::lock_guard<std::mutex> lock(mu_);
  v->stats.persist_s = Seconds(Clock::now() - v->start);
  v->stats.direct_io = v->direct_io;
  return Status::Ok();
}

void Engine::CommitLoop() {
  for (;;) {
    std::shared_ptr<Version> v;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !commit_queue_.empty(); });
      if (commit_queue_.empty()) return;
      v = commit_queue_.front();
      commit_queue_.pop_front();
    }
    // Versions finish out of order (their flushes overlap): one older than a version already
    // made LATEST completes its directory but leaves LATEST where it is.
    bool move_latest;
    uint64_t in_flight = UINT64_MAX;  // the oldest other version still being written
    {
      std::lock_guard<std::mutex> lock(mu_);
      move_latest = !latest_moved_ || v->version > latest_version_;
      for (const auto& [n, other] : versions_) {
        if (other != v && !other->done()) {
          in_flight = n;
          break;
        }
      }
    }
    Status status = RunGuarded("the checkpoint engine\'s commit thread", [&] {
      return CommitVersion(io_.get(), options_.dir, v->version, options_.world_size,
                           options_.commit_timeout, move_latest, &abandoned_, options_.write_id);
    });
    if (status.ok()) {
      // An abandoned engine prunes nothing: the recovery that abandoned it may restore any version
      // on disk, and the next engine prunes once every rank wrote a version after it.
      std::lock_guard<std::mutex> prune_lock(prune_mu_);
      if (!abandoned_) {
        Status pruned = RunGuarded("the checkpoint engine\'s commit thread", [&] {
          return PruneVersions(io_.get(), options_.dir, *options_.keep_versions, in_flight);
        });
        if (!pruned.ok())
          RTFT_LOG(kWarn, kLogCkpt) << "pruning old versions: " << pruned.ToString();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok()) FailLocked(v.get(), status);
    if (status.ok() && move_latest) {
      latest_moved_ = true;
      latest_version_ = v->version;
    }
    v->stats.commit_s = Seconds(Clock::now() - v->start);
    SetStageLocked(v.get(), VersionStage::kDone);
  }
}

}  // namespace rtft::internal
