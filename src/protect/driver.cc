// The step driver (docs/protect.md, "Step driver"): the bracket and the recovery that every
// protected loop needs, written once on top of the public bracket, so that the application's loop
// has no recovery branch.
#include <chrono>

#include "core/logging.h"
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

StatusOr<RunResult> RunSteps(ProtectorImpl* p, uint64_t end_step, const StepFns& fns) {
  const bool split = fns.local && fns.reduce;
  if ((!fns.compute && !split) || !fns.update)
    return Status::InvalidArgument(
        "Protector::Run needs an update function and a compute function (or local and reduce)");
  if (static_cast<bool>(fns.local) != static_cast<bool>(fns.reduce))
    return Status::InvalidArgument("Protector::Run: local and reduce come together");
  const bool fresh = !p->started();
  StatusOr<uint64_t> start = p->Start();
  const RecoveryInfo& info = p->last_recovery();
  if (!start.ok() && start.status().code() == StatusCode::kShutdown)
    return RunResult{RunOutcome::kShutdown, p->next_step(), info.final_checkpoint};
  RTFT_RETURN_IF_ERROR(start.status());
  uint64_t step = *start;
  // A spare, a restarted process or a job started again from L3 begins with a recovery.
  const RecoveryInfo* recovered = fresh && info.epoch > 0 ? &info : nullptr;
  if (p->replay_every() > 0 && !split)
    return Status::InvalidArgument(
        "the replay of steps (RTFT_PROTECT_REPLAY_EVERY, ProtectOptions::replay_every) needs the "
        "step's compute split into local and reduce functions (StepFns)");
  if (p->check_finite() && !split)
    return Status::InvalidArgument(
        "the check for non-finite gradients (RTFT_PROTECT_CHECK_FINITE, "
        "ProtectOptions::check_finite) needs the step's compute split into local and reduce "
        "functions (StepFns): local names the gradients it checks");
  while (step < end_step) {
    StepContext ctx = p->Context(step);
    ctx.recovered = recovered;
    // Where each step's time went (debug): the bracket's calls and the application's.
    using Clock = std::chrono::steady_clock;
    Clock::time_point t[6];
    t[0] = Clock::now();
    Status s = p->BeginStep(step);
    t[1] = Clock::now();
    ReplayOutcome replay;
    if (s.ok()) s = ComputeStep(ctx, fns, p->replay_every(), p->check_finite(), &replay);
    if (s.ok() && replay.replayed) p->MarkReplayed();
    if (replay.faulty) p->NoteFaulty();
    t[2] = Clock::now();
    if (s.ok()) s = p->BeforeUpdate();
    t[3] = Clock::now();
    if (s.ok()) s = fns.update(ctx);
    t[4] = Clock::now();
    if (s.ok()) s = p->EndStep();
    t[5] = Clock::now();
    using Ms = std::chrono::duration<double, std::milli>;
    auto ms = [&](int i) { return Ms(t[i] - t[i - 1]).count(); };
    // At: the host's monotonic clock, comparable between the ranks of one host.
    RTFT_LOG(kDebug, kLogRuntime) << "step " << step
                                  << (p->step_protected() ? " protected" : " paused") << " at "
                                  << Ms(t[0].time_since_epoch()).count() << " ms: begin " << ms(1)
                                  << " ms, compute " << ms(2) << " ms, fence " << ms(3)
                                  << " ms, update " << ms(4) << " ms, end " << ms(5) << " ms";
    if (s.ok()) {
      ++step;
      recovered = nullptr;
      continue;
    }
    if (s.code() == StatusCode::kDeviceLost) p->ReportDeviceError(s.message());
    if (s.code() != StatusCode::kAborted) {
      // Nothing reads the application's state once Run has returned: the capture in flight
      // (begun by this step's BeginStep) is over first. Its status is the step's error's to give.
      p->EndCapture();
      return s;
    }
    StatusOr<uint64_t> resumed = p->Recover();
    if (!resumed.ok() && resumed.status().code() == StatusCode::kShutdown)
      return RunResult{RunOutcome::kShutdown, step, info.final_checkpoint};
    RTFT_RETURN_IF_ERROR(resumed.status());
    step = *resumed;
    recovered = &info;
  }
  return RunResult{RunOutcome::kDone, step, false};
}

}  // namespace protect
}  // namespace rtft
