// The step driver (docs/protect.md, "Step driver"): the bracket and the recovery that every
// protected loop needs, written once on top of the public bracket, so that the application's loop
// has no recovery branch.
#include "protect/protector.h"

namespace rtft {

const char* RunOutcomeName(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kDone:
      return "done";
    case RunOutcome::kShutdown:
      return "shutdown";
  }
  return "?";
}

namespace protect {

StatusOr<RunResult> ProtectorImpl::Run(uint64_t end_step, const StepFns& fns) {
  if (!fns.compute || !fns.update)
    return Status::InvalidArgument("Protector::Run needs both a compute and an update function");
  const bool fresh = phase_ == Phase::kDescribing;
  StatusOr<uint64_t> start = Start();
  if (!start.ok() && start.status().code() == StatusCode::kShutdown)
    return RunResult{RunOutcome::kShutdown, next_step_, info_.final_checkpoint};
  RTFT_RETURN_IF_ERROR(start.status());
  uint64_t step = *start;
  // A spare, a restarted process or a job started again from L3 begins with a recovery.
  const RecoveryInfo* recovered = fresh && info_.epoch > 0 ? &info_ : nullptr;
  while (step < end_step) {
    StepContext ctx;
    ctx.step = step;
    ctx.epoch = train_->epoch();
    ctx.rank = train_->rank();
    ctx.world_size = train_->world_size();
    ctx.comm = train_.get();
    ctx.device = device_;
    ctx.stream = o_.stream;
    ctx.recovered = recovered;
    Status s = BeginStep(step);
    if (s.ok()) s = fns.compute(ctx);
    if (s.ok()) s = BeforeUpdate();
    if (s.ok()) s = fns.update(ctx);
    if (s.ok()) s = EndStep();
    if (s.ok()) {
      ++step;
      recovered = nullptr;
      continue;
    }
    if (s.code() == StatusCode::kDeviceLost) (void)rt_->ReportDeviceError(s.message());
    if (s.code() != StatusCode::kAborted) return s;
    StatusOr<uint64_t> resumed = Recover();
    if (!resumed.ok() && resumed.status().code() == StatusCode::kShutdown)
      return RunResult{RunOutcome::kShutdown, step, info_.final_checkpoint};
    RTFT_RETURN_IF_ERROR(resumed.status());
    step = *resumed;
    recovered = &info_;
  }
  return RunResult{RunOutcome::kDone, step, false};
}

}  // namespace protect
}  // namespace rtft
