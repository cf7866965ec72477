// The step bracket: BeginStep hands the L1 capture to the capture worker, which hands the step to
// the L2 replicator once the state is copied (its checksum follows when the capture is sealed);
// BeforeUpdate waits for the capture's copy; EndStep reports progress, writes L3 when it is due,
// and says whether a failure event came; CheckpointNow writes L3 between steps.
#include <algorithm>

#include "core/fault_point.h"
#include "core/logging.h"
#include "protect/l3_views.h"
#include "protect/protector.h"
#include "runtime/pause.h"

namespace rtft::protect {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// How long a rank paused for a planned swap waits at most, and how often it looks whether the
// swap was called off.
constexpr std::chrono::seconds kPauseLimit{30};
constexpr std::chrono::milliseconds kPausePoll{50};

}  // namespace

Status ProtectorImpl::BeginStep(uint64_t step) {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (phase_ != Phase::kReady)
    return Status::FailedPrecondition("BeginStep(" + std::to_string(step) + ") inside step " +
                                      std::to_string(step_) + ": EndStep() or Recover() first");
  if (held_.shards != Held::Shards::kApplication)
    return Status::Internal("the protected state is still laid out for the old world");
  RTFT_RETURN_IF_ERROR(Aborted());
  // This capture drops step - 2 from the snapshot: only once every rank's replica of step - 1 is
  // sealed (the replicator's barrier) is step - 1 a step that recovery can always fall back to.
  // The first step that is not protected waits too: the replica of the last protected step is
  // then sealed before the state changes, and its cost stays with the protected steps.
  const auto begin = std::chrono::steady_clock::now();
  // The last capture's checksums first (the fence let the step go on once its state was
  // copied; a capture that failed is reported here), then its replica: the capture hands its
  // step to the replicator before the fence learns it was copied, so that step is never one the
  // replicator was not yet given.
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  if (epoch_.replicator && step >= 1) RTFT_RETURN_IF_ERROR(epoch_.replicator->Wait(step - 1));
  if (epoch_.replicator) {
    if (auto bad = epoch_.replicator->TakeCorruption()) return Repair(*bad);
  }
  const double replica_wait = Seconds(std::chrono::steady_clock::now() - begin);
  step_ = step;
  phase_ = Phase::kInStep;
  held_.untouched = false;  // the application may change its state from here
  step_protected_ = Protected(step);
  replay_.step_replayed = false;
  if (!step_protected_) return Status::Ok();
  ++stats_.protected_steps;
  stats_.replica_wait_s += replica_wait;
  l3_->BeforeCapture(step);
  FaultPoint("protect.capture");
  // Right after a recovery the snapshot of this step is the state itself: capturing it again
  // would only open a window in which it is incomplete.
  const bool restored = restored_step_ == step && held_.l1->Verify(step);
  restored_step_.reset();
  if (restored) {
    if (epoch_.replicator) epoch_.replicator->Submit(step);
  } else {
    RTFT_RETURN_IF_ERROR(StartCapture(step));
  }
  return PauseForSwap(step);
}

// The cross-check found that copies of the replicated tensors differ at `bad.step`
// (docs/protect.md, "Silent data corruption"). The corrupt copy may have fed that step's compute,
// or the one before (a flip between the older snapshot and its compute is seen only now), so
// every rank's update since the older snapshot may be wrong: the replicator dropped every rank's
// snapshot of the step and asked for the epoch when it found it, and recovery goes back to the
// older one, the last whose copies agreed (where some rank holds none, only the corrupt copy was
// dropped and it is fed from a peer). Here the rank only stops before its next step.
Status ProtectorImpl::Repair(const Corruption& bad) {
  return Status::Aborted("silent data corruption found at step " + std::to_string(bad.step) +
                         ": going back to the last step whose copies agreed");
}

Status ProtectorImpl::PauseForSwap(uint64_t step) {
  const std::optional<PauseRequest> want = PauseWanted(rt_);
  if (!want || !epoch_.train || want->epoch != epoch_.train->epoch() || want->step != step)
    return Status::Ok();
  // What the swap restores on every rank, and what the spare is fed from: this step's snapshot,
  // checksummed and in its replica holder's L2.
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  if (epoch_.replicator) RTFT_RETURN_IF_ERROR(epoch_.replicator->Wait(step));
  FaultPoint("protect.pause");  // test hook: a rank that never says it paused
  ReportPaused(rt_, *want);
  RTFT_LOG(kInfo, kLogRuntime) << "paused at step " << step << " for a planned swap";
  const uint64_t epoch = want->epoch;
  // The coordinator gives up on a swap long before this (it calls it off, or swaps through the
  // lost-slot path); a rank that hears neither goes on by itself.
  const auto until = std::chrono::steady_clock::now() + kPauseLimit;
  while (std::chrono::steady_clock::now() < until) {
    if (events_.WaitForEpochAfter(epoch, std::chrono::steady_clock::now() + kPausePoll) ||
        events_.shutting_down())
      return Aborted();
    const std::optional<PauseRequest> still = PauseWanted(rt_);
    if (!still || still->epoch != epoch || still->step != step) break;  // called off
  }
  RTFT_LOG(kInfo, kLogRuntime) << "the planned swap at step " << step << " is off: going on";
  return Status::Ok();
}

Status ProtectorImpl::StartCapture(uint64_t step) {
  RTFT_ASSIGN_OR_RETURN(std::string objects, SerializeObjects(held_.layout.objects));
  // The capture worker is idle here (the last capture was waited for): the tensors that compute
  // changes go into the area now, on this thread.
  RTFT_RETURN_IF_ERROR(held_.l1->CaptureEarly(step, settings_.options.stream));
  Capturer::Job job;
  job.step = step;
  job.epoch = epoch_.train->epoch();
  job.rank = epoch_.train->rank();
  job.world = epoch_.train->world_size();
  const uint64_t object_bytes = objects.size();
  job.objects = std::move(objects);
  job.stream = settings_.options.stream;
  // Runs on the capture worker once the state is copied; the replicator outlives the capture
  // (recovery waits for it).
  job.copied = [this, object_bytes](uint64_t s, Capturer::Sealed sealed) {
    if (epoch_.replicator) epoch_.replicator->Submit(s, object_bytes, std::move(sealed));
  };
  return capture_->Begin(std::move(job));
}

Status ProtectorImpl::BeforeUpdate() {
  if (phase_ != Phase::kInStep)
    return Status::FailedPrecondition("BeforeUpdate() outside a step: BeginStep() first");
  const auto begin = std::chrono::steady_clock::now();
  RTFT_RETURN_IF_ERROR(capture_->WaitCopied());
  if (step_protected_ && settings_.sdc_fence && epoch_.replicator &&
      epoch_.replicator->checking()) {
    // RTFT_PROTECT_SDC_FENCE: the step's exchange, whose gather compares the copies, ends before
    // the update. Every rank records the verdict before the barrier that precedes the repair's
    // epoch, so an exchange that this epoch cut short has the verdict too.
    const Status exchanged = epoch_.replicator->Wait(step_);
    if (auto bad = epoch_.replicator->TakeCorruption()) {
      RTFT_LOG(kWarn, kLogRuntime) << "silent data corruption found before step " << step_
                                   << "'s update: the update does not run";
      return Repair(*bad);
    }
    RTFT_RETURN_IF_ERROR(exchanged);
  }
  if (step_protected_) stats_.fence_wait_s += Seconds(std::chrono::steady_clock::now() - begin);
  FaultPoint("protect.update");
  phase_ = Phase::kUpdating;
  return Aborted();
}

Status ProtectorImpl::EndStep() {
  if (phase_ != Phase::kInStep && phase_ != Phase::kUpdating)
    return Status::FailedPrecondition("EndStep() outside a step: BeginStep() first");
  // The capture may still be hashing: the next BeginStep (or an L3 write) waits for it.
  RTFT_RETURN_IF_ERROR(capture_->WaitCopied());
  phase_ = Phase::kReady;
  next_step_ = step_ + 1;
  if (replay_.step_replayed) replay_.vouched = next_step_;  // made by gradients a replay checked
  (void)rt_->ReportStep(step_);
  if (step_protected_) RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/false));
  return Aborted();
}

Status ProtectorImpl::MaybeCheckpoint(uint64_t step, bool now) {
  if (!l3_->open() || (!now && !l3_->Due(step))) return Status::Ok();
  RTFT_RETURN_IF_ERROR(capture_->Wait());  // its checksums
  // Only a version whose replicated copies agreed goes to L3 (docs/protect.md, "Silent data
  // corruption"): their check ends with the step's L2 exchange. A corrupt one is repaired at the
  // next BeginStep, and the step that runs again writes its version then. Asked before the
  // snapshot is verified: the check drops a disagreeing step's snapshot, on every rank where it
  // goes back to an older one, and the skipped version is said either way.
  // The version's manifests say so (docs/format.md, "Certification"), and whether the compute run
  // from this snapshot (the step's own) was replayed by a peer and agreed: the same on every rank.
  VersionMarks marks;
  marks.replayed = replay_.step_replayed && step == step_;
  if (epoch_.replicator) {
    RTFT_RETURN_IF_ERROR(epoch_.replicator->Wait(step));
    if (epoch_.replicator->Disagreed(step)) {
      RTFT_LOG(kWarn, kLogRuntime)
          << "L3 version " << step << " not written: its replicated copies disagree";
      return Status::Ok();
    }
    marks.checked = marks.agreed = epoch_.replicator->checking();
  }
  if (!held_.l1->Verify(step)) return Status::Ok();  // no complete snapshot of it: nothing to write
  // Each rank of a data-parallel group writes its share of the rows of the replicated tensors.
  const GridPlace me = epoch_.grid.of(epoch_.train->rank());
  const AreaView view = OwnAreaView(held_.layout, held_.l1->payload(step),
                                    held_.l1->header(step)->object_bytes, me.d, me.data);
  return l3_->Write(step, view, marks);
}

Status ProtectorImpl::CheckpointNow() {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (!l3_->enabled())
    return Status::FailedPrecondition(
        "no checkpoint directory (ProtectOptions::ckpt_dir or RTFT_PROTECT_CKPT_DIR)");
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  if (!l3_->open()) RTFT_RETURN_IF_ERROR(epoch_.OpenL3(parts()));
  RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/true));
  if (l3_->pending() != step_) return Status::FailedPrecondition("no complete snapshot to write");
  return l3_->WaitPersisted(step_);
}

}  // namespace rtft::protect
