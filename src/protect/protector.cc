// The facade: the state described, protection begun (a new job, a job started again from L3, or
// a process that joins a recovery), and the recovery loop: each attempt a Recovery (recovery.h)
// whose epoch, measures and restored step are installed here.
#include "protect/protector.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "core/fault_point.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/progress.h"

namespace rtft {

Protector::~Protector() = default;

StatusOr<std::unique_ptr<Protector>> Protector::Create(Runtime* runtime,
                                                       const ProtectOptions& options) {
  if (runtime == nullptr) return Status::InvalidArgument("Protector::Create needs a runtime");
  return std::unique_ptr<Protector>(new protect::ProtectorImpl(runtime, options));
}

namespace protect {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

ProtectorImpl::ProtectorImpl(Runtime* runtime, const ProtectOptions& options)
    : rt_(runtime), settings_{options}, events_(runtime) {}

ProtectorImpl::~ProtectorImpl() {
  events_.Stop();
  capture_.reset();  // finishes a capture in flight
  epoch_.replicator.reset();
  l3_.reset();
  epoch_.train.reset();
  held_.l1.reset();
  held_.l2.reset();
  if (held_.owned_dir) {
    std::error_code ec;
    std::filesystem::remove_all(held_.dir, ec);
  }
}

Status ProtectorImpl::Protect(std::shared_ptr<StateProvider> state, ResizeState resize) {
  if (phase_ != Phase::kDescribing)
    return Status::FailedPrecondition("describe the protected state before Start()");
  if (held_.state) return Status::FailedPrecondition("the protected state is described once");
  if (!state) return Status::InvalidArgument("Protect: no state");
  StateDescription d;
  RTFT_RETURN_IF_ERROR(state->Describe(&d).Annotate("describing the protected state"));
  RTFT_ASSIGN_OR_RETURN(held_.layout, Layout::Build(d, settings_.ObjectRoom()));
  held_.state = std::move(state);
  held_.resize = std::move(resize);
  return Status::Ok();
}

Parts ProtectorImpl::parts() {
  return Parts{rt_, &settings_, &held_, l3_.get(), replica_counters_};
}

Status ProtectorImpl::Aborted() const {
  if (events_.shutting_down()) return Status::Aborted("the job is shutting down");
  if (epoch_.train && events_.NewestEpoch() > epoch_.train->epoch())
    return Status::Aborted("a failure event ended epoch " + std::to_string(epoch_.train->epoch()));
  return Status::Ok();
}

bool ProtectorImpl::Protected(uint64_t step) const {
  const ProtectOptions& o = settings_.options;
  return o.enabled && !paused_ && (!o.protect_step || o.protect_step(step));
}

Status ProtectorImpl::Open() {
  const ProtectOptions& o = settings_.options;
  int64_t ms = o.recovery_timeout.count();
  if (ms <= 0) {
    RTFT_ASSIGN_OR_RETURN(ms, ParamInt(Param::kCommCreateTimeoutMs));
  }
  settings_.recovery_timeout = milliseconds(std::max<int64_t>(ms, 1));
  settings_.device = o.device >= 0 ? o.device : rt_->info().device;
  RTFT_ASSIGN_OR_RETURN(int64_t streams, ParamInt(Param::kProtectL2Streams));
  if (streams < 1 || streams > 16)
    return Status::InvalidArgument("RTFT_PROTECT_L2_STREAMS=" + std::to_string(streams) +
                                   ": 1 to 16 connections per neighbour");
  settings_.l2_streams = static_cast<int>(streams);
  RTFT_ASSIGN_OR_RETURN(settings_.sdc_check, ParamBool(Param::kProtectSdcCheck));
  RTFT_ASSIGN_OR_RETURN(settings_.sdc_fence, ParamBool(Param::kProtectSdcFence));
  const std::string resume = ParamString(Param::kProtectResumeFrom);
  if (resume == "latest") {
    settings_.resume_from = Settings::ResumeFrom::kLatest;
  } else if (resume == "agreed") {
    settings_.resume_from = Settings::ResumeFrom::kAgreed;
  } else if (resume == "replayed") {
    settings_.resume_from = Settings::ResumeFrom::kReplayed;
  } else {
    return Status::InvalidArgument("RTFT_PROTECT_RESUME_FROM=" + resume +
                                   ": latest, agreed or replayed");
  }
  int64_t replay = o.replay_every;
  if (replay == 0) {
    RTFT_ASSIGN_OR_RETURN(replay, ParamInt(Param::kProtectReplayEvery));
  }
  settings_.replay_every = std::max<int64_t>(replay, 0);
  if (o.check_finite < -1 || o.check_finite > 1)
    return Status::InvalidArgument(
        "ProtectOptions::check_finite: 0 (RTFT_PROTECT_CHECK_FINITE), "
        "1 (on) or -1 (off), not " +
        std::to_string(o.check_finite));
  if (o.check_finite == 0) {
    RTFT_ASSIGN_OR_RETURN(settings_.check_finite, ParamBool(Param::kProtectCheckFinite));
  } else {
    settings_.check_finite = o.check_finite > 0;
  }
  const std::string ckpt = o.ckpt_dir.empty() ? ParamString(Param::kProtectCkptDir) : o.ckpt_dir;
  int64_t every = o.l3_every;
  if (every == 0) {
    RTFT_ASSIGN_OR_RETURN(every, ParamInt(Param::kProtectL3Every));
  }
  if (every > 0 && ckpt.empty())
    return Status::InvalidArgument("L3 every " + std::to_string(every) +
                                   " steps needs a checkpoint directory (ProtectOptions::ckpt_dir "
                                   "or RTFT_PROTECT_CKPT_DIR)");
  l3_ = std::make_unique<L3Writer>(ckpt, every > 0 ? every : 0, settings_.recovery_timeout);
  RTFT_RETURN_IF_ERROR(held_.Open(*rt_, settings_));
  RTFT_ASSIGN_OR_RETURN(capture_, Capturer::Start(held_.l1.get()));
  const Layout& layout = held_.layout;
  stats_.state_bytes = layout.objects_begin;
  RTFT_LOG(kInfo, kLogRuntime) << "protect: " << layout.replicated.size() << " replicated, "
                               << layout.sharded.size() << " sharded tensors, "
                               << layout.objects.size() << " objects; snapshot of "
                               << FormatBytes(layout.payload_bytes) << " in " << held_.dir;
  return Status::Ok();
}

StatusOr<uint64_t> ProtectorImpl::Start() {
  if (phase_ != Phase::kDescribing) return next_step_;
  if (!held_.state) return Status::FailedPrecondition("Protect(state) before Start()");
  RTFT_RETURN_IF_ERROR(Open());
  phase_ = Phase::kReady;
  const RuntimeInfo me = rt_->info();
  if (me.role != RuntimeRole::kInitial && me.role != RuntimeRole::kStandalone) {
    // A spare just activated, or a process restarted on its slot: it joins the recovery of the
    // epoch it was given (or of a later one, when another failure comes meanwhile).
    const auto t0 = Clock::now();
    RTFT_ASSIGN_OR_RETURN(next_step_, RecoverFrom(me.epoch, t0 + settings_.recovery_timeout));
    info_.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return next_step_;
  }
  // A new job: what a slot's files hold is from no run of this job.
  for (uint64_t k = 0; k < 2; ++k) held_.l1->Invalidate(k);
  held_.l2->Clear();
  // Nor do an earlier run's versions after LATEST: rank 0 removes them before it makes the first
  // epoch's communicators, which every other rank waits for before it writes anything.
  if (me.rank == 0 && settings_.options.enabled) WithdrawVersionsAfterLatest(parts());
  // RTFT_PROTECT_RESUME_FROM agreed or replayed: the version with the mark, the same for every
  // rank; rank 0 withdraws the versions after it at the same point, so LATEST names it for all.
  std::optional<uint64_t> resume;
  if (settings_.options.enabled) {
    RTFT_ASSIGN_OR_RETURN(resume, ResumeVersion(parts(), settings_.resume_from));
    if (resume && me.rank == 0)
      l3_->WithdrawBeforeStart(*resume, "RTFT_PROTECT_RESUME_FROM resumes from version " +
                                            std::to_string(*resume) +
                                            ", the newest with its mark; the job writes "
                                            "the versions after it again");
  }
  FaultPoint("protect.start");
  // A rank lost while the job started (before this one came here, or while it builds the first
  // epoch): a spare takes it, or its agent restarts it, in a later epoch, where this rank joins
  // its recovery.
  uint64_t epoch = rt_->current().epoch;
  Status built = Status::Aborted("the job moved on before it started");
  bool moved_on = false;
  const auto t0 = Clock::now();
  auto deadline = t0 + settings_.recovery_timeout;
  {
    // A rank that never comes (hung before here) is named by the hang detector, to which this
    // rank is one that waits for it, until the next epoch comes or the wait ends.
    WaitingForPeers waiting;
    if (epoch == me.epoch) built = epoch_.Build(parts(), epoch);
    // What an absent or lost rank makes of the first epoch's communicators; any other error (a
    // layout the world cannot hold, a backend not built) stands at once. The detector's verdict
    // may come just after this rank's own deadline passed (both are 60 s by default): the next
    // epoch is waited for once more before the error stands.
    const StatusCode code = built.code();
    const bool absent = code == StatusCode::kAborted || code == StatusCode::kDeadlineExceeded ||
                        code == StatusCode::kUnavailable;
    if (absent && me.role == RuntimeRole::kInitial && settings_.options.enabled) {
      deadline = std::max(deadline, Clock::now() + settings_.recovery_timeout);
      moved_on = events_.WaitForEpochAfter(me.epoch, deadline);
    }
  }
  if (moved_on) {
    epoch = events_.NewestEpoch();
    RTFT_LOG(kWarn, kLogRuntime) << "a rank was lost while the job started (" << built.message()
                                 << "): this one joins the recovery of epoch " << epoch;
    RTFT_ASSIGN_OR_RETURN(next_step_, RecoverFrom(epoch, deadline));
    info_.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return next_step_;
  }
  if (!built.ok() && events_.shutting_down()) return ShutDown();
  RTFT_RETURN_IF_ERROR(built);
  next_step_ = 0;
  if (!settings_.options.enabled) return next_step_;
  // A job started again with its checkpoint directory resumes from the newest version.
  const StatusOr<uint64_t> latest =
      l3_->enabled() ? LatestVersion(l3_->dir()) : Status::NotFound("no L3");
  if (resume && (!latest.ok() || *latest != *resume))
    return Status::FailedPrecondition("RTFT_PROTECT_RESUME_FROM: LATEST in " + l3_->dir() +
                                      " does not name version " + std::to_string(*resume) +
                                      ", which rank 0 was to move it back to (see its log)");
  if (latest.ok()) {
    held_.untouched = false;
    RTFT_ASSIGN_OR_RETURN(next_step_, RestoreL3(parts(), &epoch_, epoch, &info_, *latest));
    step_ = next_step_;
    replay_.vouched = next_step_;
    return next_step_;
  }
  RTFT_RETURN_IF_ERROR(held_.PlaceShards(epoch_));
  RTFT_RETURN_IF_ERROR(epoch_.OpenL3(parts()));
  replay_.vouched = next_step_;
  return next_step_;
}

StatusOr<RunResult> ProtectorImpl::Run(uint64_t end_step, const StepFns& fns) {
  return RunSteps(this, end_step, fns);
}

StepContext ProtectorImpl::Context(uint64_t step) const {
  StepContext ctx;
  ctx.step = step;
  ctx.epoch = epoch_.train->epoch();
  ctx.rank = epoch_.train->rank();
  ctx.world_size = epoch_.train->world_size();
  ctx.comm = epoch_.train.get();
  ctx.device = settings_.device;
  ctx.place = epoch_.grid.of(ctx.rank);
  ctx.tensor = epoch_.tensor.get();
  ctx.pipeline = epoch_.pipeline.get();
  ctx.data = epoch_.grid.flat() ? epoch_.train.get() : epoch_.data.get();
  ctx.stream = settings_.options.stream;
  ctx.data_rank = ctx.place.d;
  return ctx;
}

StatusOr<uint64_t> ProtectorImpl::Recover() {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (events_.shutting_down()) return ShutDown();
  if (!settings_.options.enabled)
    return Status::FailedPrecondition(
        "protection is off (ProtectOptions::enabled): nothing to recover from");
  (void)capture_->Wait();
  phase_ = Phase::kReady;
  StopReplication();
  const uint64_t from = epoch_.train ? epoch_.train->epoch() : 0;
  const auto t0 = Clock::now();
  const auto deadline = t0 + settings_.recovery_timeout;
  // The failure event names the epoch to recover into.
  const bool moved = events_.WaitForEpochAfter(from, deadline);
  if (events_.shutting_down()) return ShutDown();
  if (!moved)
    return Status::DeadlineExceeded("no failure event came within " +
                                    std::to_string(settings_.recovery_timeout.count()) +
                                    " ms of a failed call (is dp-launch running this job?)");
  info_ = RecoveryInfo();
  info_.wait_event_s = Since(t0);
  auto step = RecoverFrom(events_.NewestEpoch(), deadline);
  info_.total_s = Since(t0);
  if (step.ok()) next_step_ = *step;
  return step;
}

// The job is ending: under checkpoint-and-exit, the checkpoint first.
Status ProtectorImpl::ShutDown() {
  const std::optional<FailureEvent> event = events_.shutdown_event();
  const bool checkpoint = event && event->checkpoint_first;
  if (checkpoint) {
    RTFT_RETURN_IF_ERROR(FinalCheckpoint());
    info_.final_checkpoint = true;
  }
  return Status::Shutdown(checkpoint ? "the job is shutting down (its checkpoint is written)"
                                     : "the job is shutting down");
}

StatusOr<uint64_t> ProtectorImpl::RecoverFrom(uint64_t epoch, Clock::time_point deadline) {
  while (true) {
    auto step =
        Install(Recovery(parts(), std::move(epoch_), std::move(info_), replay_.ceiling).Run(epoch));
    if (step.ok() || step.status().code() != StatusCode::kAborted) return step;
    if (events_.shutting_down()) return ShutDown();
    RTFT_LOG(kWarn, kLogRuntime) << "recovery into epoch " << epoch << " failed: " << step.status()
                                 << "; waiting for the next epoch";
    StopReplication();
    // The job moved past `epoch` (that is what aborts a recovery): its event is on its way, so
    // the wait for it starts anew; the old deadline may be spent by the aborted recovery's own
    // waits (a gather whose absent rank the coordinator failed at that very deadline).
    deadline = std::max(deadline, Clock::now() + settings_.recovery_timeout);
    if (!events_.WaitForEpochAfter(epoch, deadline))
      return events_.shutting_down() ? ShutDown() : step;
    epoch = events_.NewestEpoch();
  }
}

StatusOr<uint64_t> ProtectorImpl::Install(Recovered recovered) {
  epoch_ = std::move(recovered.epoch);
  info_ = std::move(recovered.info);
  stats_.state_bytes = held_.layout.objects_begin;  // a shrink describes the state again
  if (recovered.step.ok()) {
    // Restored into, unless the job started again from the state each rank built.
    if (info_.source != "start") held_.untouched = false;
    step_ = *recovered.step;
    if (recovered.in_memory) restored_step_ = *recovered.step;
    // The restored state is what the job agreed on; no newer one than before is vouched for.
    replay_.vouched = std::min(replay_.vouched.value_or(step_), step_);
    replay_.ceiling.reset();
  }
  return std::move(recovered.step);
}

void ProtectorImpl::NoteFaulty() { replay_.ceiling = replay_.vouched; }

// Checkpoint-and-exit's part here: the capture over and the replication stopped first.
Status ProtectorImpl::FinalCheckpoint() {
  const std::optional<FailureEvent> event = events_.shutdown_event();
  if (!event) return Status::Internal("no shutdown event");
  if (!l3_->enabled())
    return Status::FailedPrecondition(
        "checkpoint-and-exit: no checkpoint directory (ProtectOptions::ckpt_dir or "
        "RTFT_PROTECT_CKPT_DIR) to write to");
  if (!epoch_.train || held_.table.world() != epoch_.grid.data())
    return Status::FailedPrecondition("checkpoint-and-exit before protection started");
  (void)capture_->Wait();
  StopReplication();
  return WriteFinalCheckpoint(parts(), epoch_, *event);
}

void ProtectorImpl::StopReplication() {
  epoch_.replicator.reset();  // aborts its communicator; its thread ends
  l3_->Retire();              // a commit may wait for a rank that is gone
}

}  // namespace protect
}  // namespace rtft
