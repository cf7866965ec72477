// The step bracket: BeginStep hands the L1 capture to the capture worker, which hands the step to
// the L2 replicator once it is complete; BeforeUpdate waits for the capture; EndStep reports
// progress, writes L3 when it is due, and says whether a failure event came.
#include "core/fault_point.h"
#include "protect/l3_views.h"
#include "protect/protector.h"

namespace rtft::protect {

Status ProtectorImpl::BeginStep(uint64_t step) {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (phase_ != Phase::kReady)
    return Status::FailedPrecondition("BeginStep(" + std::to_string(step) + ") inside step " +
                                      std::to_string(step_) + ": EndStep() or Recover() first");
  if (shards_ != Shards::kApplication)
    return Status::Internal("the protected state is still laid out for the old world");
  RTFT_RETURN_IF_ERROR(Aborted());
  // This capture drops step - 2 from the snapshot: only once every rank's replica of step - 1 is
  // sealed (the replicator's barrier) is step - 1 a step that recovery can always fall back to.
  // The first step that is not protected waits too: the replica of the last protected step is
  // then sealed before the state changes, and its cost stays with the protected steps.
  if (replicator_ && step >= 1) RTFT_RETURN_IF_ERROR(replicator_->Wait(step - 1));
  step_ = step;
  phase_ = Phase::kInStep;
  step_protected_ = Protected(step);
  if (!step_protected_) return Status::Ok();
  l3_->BeforeCapture(step);
  FaultPoint("protect.capture");
  // Right after a recovery the snapshot of this step is the state itself: capturing it again
  // would only open a window in which it is incomplete.
  const bool restored = restored_step_ == step && l1_->Verify(step);
  restored_step_.reset();
  if (restored) {
    if (replicator_) replicator_->Submit(step);
    return Status::Ok();
  }
  return StartCapture(step);
}

Status ProtectorImpl::StartCapture(uint64_t step) {
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(layout_.objects));
  Capturer::Job job;
  job.step = step;
  job.epoch = train_->epoch();
  job.rank = train_->rank();
  job.world = train_->world_size();
  job.objects = std::move(objects);
  job.stream = o_.stream;
  // Runs on the capture worker; the replicator outlives the capture (recovery waits for it).
  job.done = [this](uint64_t s) {
    if (replicator_) replicator_->Submit(s);
  };
  return capture_->Begin(std::move(job));
}

Status ProtectorImpl::BeforeUpdate() {
  if (phase_ != Phase::kInStep)
    return Status::FailedPrecondition("BeforeUpdate() outside a step: BeginStep() first");
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  FaultPoint("protect.update");
  phase_ = Phase::kUpdating;
  return Aborted();
}

Status ProtectorImpl::EndStep() {
  if (phase_ != Phase::kInStep && phase_ != Phase::kUpdating)
    return Status::FailedPrecondition("EndStep() outside a step: BeginStep() first");
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  phase_ = Phase::kReady;
  next_step_ = step_ + 1;
  (void)rt_->ReportStep(step_);
  if (step_protected_) RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/false));
  return Aborted();
}

Status ProtectorImpl::MaybeCheckpoint(uint64_t step, bool now) {
  if (!l3_->open() || (!now && !l3_->Due(step))) return Status::Ok();
  if (!l1_->Verify(step)) return Status::Ok();  // no complete snapshot of it: nothing to write
  const AreaView view = OwnAreaView(layout_, l1_->payload(step), l1_->header(step)->object_bytes,
                                    train_->rank(), train_->world_size());
  return l3_->Write(step, view);
}

}  // namespace rtft::protect
