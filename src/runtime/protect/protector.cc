// The step bracket: BeginStep starts the L1 capture on a thread of its own and, once it is
// complete, hands the step to the L2 replicator; BeforeUpdate waits for the capture; EndStep
// reports progress and says whether a failure event came.
#include <filesystem>

#include "core/fault_point.h"
#include "core/logging.h"
#include "core/params.h"
#include "runtime/protect/protector_impl.h"

namespace rtft {

Protector::~Protector() = default;

StatusOr<std::unique_ptr<Protector>> Protector::Create(Runtime* runtime,
                                                       const ProtectOptions& options) {
  if (runtime == nullptr) return Status::InvalidArgument("Protector::Create needs a runtime");
  return std::unique_ptr<Protector>(new protect::ProtectorImpl(runtime, options));
}

namespace protect {

ProtectorImpl::ProtectorImpl(Runtime* runtime, const ProtectOptions& options)
    : rt_(runtime), o_(options) {
  listener_ = rt_->Subscribe([this](const FailureEvent& e) {
    if (e.shutdown) {
      std::lock_guard<std::mutex> lock(event_mu_);
      shutdown_event_ = e;
      shutdown_ = true;
    }
    uint64_t seen = event_epoch_.load();
    while (e.epoch > seen && !event_epoch_.compare_exchange_weak(seen, e.epoch)) {
    }
  });
}

ProtectorImpl::~ProtectorImpl() {
  rt_->Unsubscribe(listener_);
  if (capture_.joinable()) capture_.join();
  replicator_.reset();
  l3_.reset();
  train_.reset();
  l1_.reset();
  l2_.reset();
  if (owned_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Status ProtectorImpl::AddReplicated(TensorDesc tensor) {
  if (started_) return Status::FailedPrecondition("declare the protected state before Start()");
  layout_.replicated.push_back({std::move(tensor)});
  return Status::Ok();
}

Status ProtectorImpl::AddSharded(TensorDesc tensor) {
  if (started_) return Status::FailedPrecondition("declare the protected state before Start()");
  layout_.sharded.push_back({std::move(tensor)});
  return Status::Ok();
}

Status ProtectorImpl::OnShrink(Reshard reshard) {
  if (started_) return Status::FailedPrecondition("set OnShrink before Start()");
  reshard_ = std::move(reshard);
  return Status::Ok();
}

Status ProtectorImpl::AddObject(ObjectDesc object) {
  if (started_) return Status::FailedPrecondition("declare the protected state before Start()");
  layout_.objects.push_back(std::move(object));
  return Status::Ok();
}

uint64_t ProtectorImpl::EventEpoch() const {
  return std::max(event_epoch_.load(), rt_->current().epoch);
}

Status ProtectorImpl::Aborted() const {
  if (shutdown_) return Status::Aborted("the job is shutting down");
  if (train_ && EventEpoch() > train_->epoch())
    return Status::Aborted("a failure event ended epoch " + std::to_string(train_->epoch()));
  return Status::Ok();
}

Status ProtectorImpl::Open() {
  if (o_.recovery_timeout.count() > 0) {
    recovery_timeout_ = o_.recovery_timeout;
  } else {
    RTFT_ASSIGN_OR_RETURN(int64_t ms, ParamInt(Param::kCommCreateTimeoutMs));
    recovery_timeout_ = milliseconds(std::max<int64_t>(ms, 1));
  }
  RTFT_RETURN_IF_ERROR(layout_.Finish(ObjectRoom()));
  RTFT_RETURN_IF_ERROR(ResolveL3());
  RTFT_ASSIGN_OR_RETURN(dir_, ProtectDir(o_.shm_dir, &owned_dir_));
  if (rt_->info().role == RuntimeRole::kRestarted) RTFT_RETURN_IF_ERROR(AdoptOldLayout());
  if (!l1_) {
    RTFT_ASSIGN_OR_RETURN(l1_, Snapshot::Open(dir_, layout_));
  }
  RTFT_ASSIGN_OR_RETURN(l2_, ReplicaStore::Open(dir_));
  RTFT_LOG(kInfo, kLogRuntime) << "protect: " << layout_.replicated.size() << " replicated, "
                               << layout_.sharded.size() << " sharded tensors, "
                               << layout_.objects.size() << " objects; snapshot of "
                               << FormatBytes(layout_.payload_bytes) << " in " << dir_;
  return Status::Ok();
}

// The training communicator and the replication one, of `epoch`.
Status ProtectorImpl::BuildComms(uint64_t epoch) {
  replicator_.reset();
  train_.reset();
  CommOptions train;
  train.backend = o_.backend;
  train.create_timeout = recovery_timeout_;
  RTFT_ASSIGN_OR_RETURN(train_, rt_->CreateCommunicator(o_.comm_name, train));
  if (train_->epoch() != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(train_->epoch()));
  if (train_->world_size() > 1 && o_.enabled) {
    CommOptions replica;
    replica.backend = CommBackend::kGloo;
    replica.create_timeout = recovery_timeout_;
    RTFT_ASSIGN_OR_RETURN(auto comm, rt_->CreateCommunicator(o_.comm_name + ".replica", replica));
    replicator_ = std::make_unique<Replicator>(std::move(comm), l1_.get(), l2_.get());
  }
  return Status::Ok();
}

// A process restarted in the middle of a shrink's recovery finds its snapshot laid out for the
// old world, its shards sized for it, while the application declared shards sized for the new
// one: opened with the declared layout, the snapshot would be thrown away. Rebuilt from the sizes
// the file records, the old layout opens it, and this rank takes part in the shrink as the
// survivor it is (docs/protect.md, "Shrink"). Until the shrink lays the state out again
// (Relayout), the sharded entries describe the snapshot only: shards_stale_ keeps every use of
// them as application memory away.
Status ProtectorImpl::AdoptOldLayout() {
  const std::optional<Snapshot::FileLayout> file = Snapshot::Peek(dir_);
  if (!file || file->layout_hash == layout_.hash ||
      file->sharded_bytes.size() != layout_.sharded.size() || layout_.sharded.empty())
    return Status::Ok();
  static char snapshot_only;  // a non-null address that is never read or written
  Layout old = layout_;
  for (size_t i = 0; i < old.sharded.size(); ++i) {
    TensorDesc& t = old.sharded[i].tensor;
    const uint64_t bytes = file->sharded_bytes[i], size = DTypeSize(t.dtype);
    if (size == 0 || bytes % size != 0) return Status::Ok();
    t.shape = {static_cast<int64_t>(bytes / size)};
    t.data = &snapshot_only;
  }
  if (!old.Finish(ObjectRoom()).ok() || old.hash != file->layout_hash) return Status::Ok();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> l1, Snapshot::Open(dir_, old));
  const std::vector<uint64_t> steps = l1->CompleteSteps();
  if (steps.empty()) return Status::Ok();  // nothing worth keeping: the declared layout it is
  const AreaHeader* h = l1->header(steps.front());
  // Only a world that changed explains another layout; anything else starts over, as before.
  if (h->world <= 0 || h->rank < 0 || h->rank >= h->world || h->world == rt_->current().world_size)
    return Status::Ok();
  layout_ = std::move(old);
  l1_ = std::move(l1);
  held_rank_ = h->rank;
  held_world_ = h->world;
  shards_stale_ = true;
  RTFT_LOG(kWarn, kLogRuntime) << "protect: this process's snapshot is laid out for rank "
                               << held_rank_ << " of " << held_world_
                               << " ranks (restarted while the job shrank): kept for the shrink";
  return Status::Ok();
}

StatusOr<uint64_t> ProtectorImpl::Start() {
  if (started_) return Status::FailedPrecondition("Protector::Start() called twice");
  started_ = true;
  RTFT_RETURN_IF_ERROR(Open());
  const RuntimeInfo me = rt_->info();
  if (me.role == RuntimeRole::kInitial || me.role == RuntimeRole::kStandalone) {
    // A new job: what a slot's files hold is from no run of this job.
    for (uint64_t k = 0; k < 2; ++k) l1_->Invalidate(k);
    l2_->Clear();
    const uint64_t epoch = rt_->current().epoch;
    RTFT_RETURN_IF_ERROR(BuildComms(epoch));
    step_ = 0;
    if (o_.enabled) {
      // A job started again with its checkpoint directory resumes from the newest version.
      if (!ckpt_dir_.empty() && LatestVersion(ckpt_dir_).ok()) return RestoreL3(epoch);
      RTFT_RETURN_IF_ERROR(PlaceShards());
      RTFT_RETURN_IF_ERROR(OpenL3());
    }
    return step_;
  }
  // A spare just activated, or a process restarted on its slot: it joins the recovery of the
  // epoch it was given (or of a later one, when another failure comes meanwhile).
  return RecoverFrom(me.epoch, Clock::now() + recovery_timeout_);
}

Status ProtectorImpl::BeginStep(uint64_t step) {
  if (!train_) return Status::FailedPrecondition("Protector::Start() first");
  if (shards_stale_)
    return Status::Internal("the protected state is still laid out for the old world");
  RTFT_RETURN_IF_ERROR(JoinCapture());
  RTFT_RETURN_IF_ERROR(Aborted());
  // This capture drops step - 2 from the snapshot: only once every rank's replica of step - 1 is
  // sealed (the replicator's barrier) is step - 1 a step that recovery can always fall back to.
  // The first step of a pause waits too: the replica of the last protected step is then sealed
  // before the state changes, and its cost stays with the protected steps. (Without protection
  // there is no replicator.)
  if (replicator_ && step >= 1) RTFT_RETURN_IF_ERROR(replicator_->Wait(step - 1));
  step_ = step;
  if (!o_.enabled || paused_) return Status::Ok();
  RTFT_RETURN_IF_ERROR(WaitL3Area(step));
  FaultPoint("protect.capture");
  in_step_ = true;
  capture_status_ = Status::Ok();
  // Right after a recovery the snapshot of this step is the state itself: capturing it again
  // would only open a window in which it is incomplete.
  if (step == restored_step_ && l1_->Verify(step)) {
    restored_step_ = kNoStep;
    if (replicator_) replicator_->Submit(step);
    return Status::Ok();
  }
  restored_step_ = kNoStep;
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(layout_.objects));
  const RuntimeInfo now = rt_->current();
  const uint64_t epoch = train_->epoch();
  capture_ = std::thread([this, step, epoch, now, objects = std::move(objects)] {
    capture_status_ = l1_->Capture(step, epoch, now.rank, now.world_size, objects);
    if (capture_status_.ok() && replicator_) replicator_->Submit(step);
  });
  return Status::Ok();
}

Status ProtectorImpl::JoinCapture() {
  if (capture_.joinable()) capture_.join();
  return capture_status_;
}

Status ProtectorImpl::BeforeUpdate() {
  RTFT_RETURN_IF_ERROR(JoinCapture());
  FaultPoint("protect.update");
  return Aborted();
}

Status ProtectorImpl::EndStep() {
  RTFT_RETURN_IF_ERROR(JoinCapture());
  in_step_ = false;
  (void)rt_->ReportStep(step_);
  if (o_.enabled && !paused_) RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/false));
  return Aborted();
}

}  // namespace protect
}  // namespace rtft
