// L3 beyond the per-step writes (docs/protect.md, "Levels" and "Spares exhausted"): a checkpoint
// on demand, the one the survivors write when the job ends for want of spares, and the restore
// from the newest version when memory holds no step that every rank can resume from.
#include "core/logging.h"
#include "protect/l3_views.h"
#include "protect/protector.h"

namespace rtft::protect {

Status ProtectorImpl::CheckpointNow() {
  if (phase_ == Phase::kDescribing) return Status::FailedPrecondition("Protector::Start() first");
  if (!l3_->enabled())
    return Status::FailedPrecondition(
        "no checkpoint directory (ProtectOptions::ckpt_dir or RTFT_PROTECT_CKPT_DIR)");
  RTFT_RETURN_IF_ERROR(capture_->Wait());
  if (!l3_->open()) RTFT_RETURN_IF_ERROR(OpenL3());
  RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/true));
  if (l3_->pending() != step_) return Status::FailedPrecondition("no complete snapshot to write");
  return l3_->WaitPersisted(step_);
}

// `--on-spares-exhausted checkpoint-and-exit`: the survivors agree on the newest step whose state
// is complete and write one L3 version of it, each its own file and the holder of each lost rank's
// replica that rank's file too, so the version is complete even when rank 0 is the one lost.
Status ProtectorImpl::FinalCheckpoint() {
  FailureEvent e;
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    if (!shutdown_event_) return Status::Internal("no shutdown event");
    e = *shutdown_event_;
  }
  if (!l3_->enabled())
    return Status::FailedPrecondition(
        "checkpoint-and-exit: no checkpoint directory (ProtectOptions::ckpt_dir or "
        "RTFT_PROTECT_CKPT_DIR) to write to");
  if (!train_ || table_.world() != grid_.data())
    return Status::FailedPrecondition("checkpoint-and-exit before protection started");
  (void)capture_->Wait();
  StopReplication();
  const int world = train_->world_size(), me = train_->rank();
  std::vector<bool> lost(world, false);
  for (int f : e.failed_ranks)
    if (f >= 0 && f < world) lost[f] = true;
  RTFT_ASSIGN_OR_RETURN(const RecoveryPlan plan, AgreeFinal(e.epoch, me, lost));
  if (!plan.ok) return Status::DataLoss("checkpoint-and-exit: " + plan.why);
  const uint64_t step = plan.step;
  auto latest = LatestVersion(l3_->dir());
  if (latest.ok() && *latest >= step) return Status::Ok();  // written already
  // Each file by its rank; the rows of the replicated tensors by the position in the
  // data-parallel group, and a replica's owner is a position there too.
  std::vector<std::pair<int, AreaView>> files;
  const char* area = l1_->payload(step);
  const GridPlace at = grid_.of(me);
  files.emplace_back(me,
                     OwnAreaView(layout_, area, l1_->header(step)->object_bytes, at.d, at.data));
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    if (plan.holder[i] != me) continue;
    const int lost = grid_.of(plan.needy[i]).d;
    const auto held = l2_->Find(lost, step);
    if (!held) return Status::DataLoss("checkpoint-and-exit: the replica went missing");
    RTFT_ASSIGN_OR_RETURN(
        AreaView view, ReplicaAreaView(layout_, table_, area, l2_->Data(step), held->bytes, lost));
    files.emplace_back(plan.needy[i], std::move(view));
  }
  RTFT_RETURN_IF_ERROR(WriteFiles(step, world, files));
  RTFT_LOG(kWarn, kLogRuntime) << "checkpoint-and-exit: step " << step << " written to "
                               << l3_->dir() << " (" << files.size() << " file(s) by this rank)";
  return Status::Ok();
}

// One engine per file (a rank's own, or a lost rank's from its replica), all written at once.
Status ProtectorImpl::WriteFiles(uint64_t step, int world,
                                 const std::vector<std::pair<int, AreaView>>& files) {
  std::vector<std::unique_ptr<CheckpointEngine>> engines;
  for (const auto& [rank, view] : files) {
    RTFT_ASSIGN_OR_RETURN(
        auto engine, CheckpointEngine::Create(l3_->Options(rank, world, layout_.payload_bytes)));
    RTFT_RETURN_IF_ERROR(engine->Checkpoint(step, view));
    engines.push_back(std::move(engine));
  }
  for (size_t i = 0; i < engines.size(); ++i)
    RTFT_RETURN_IF_ERROR(engines[i]->WaitPersisted(step).Annotate(
        "checkpoint-and-exit: writing rank " + std::to_string(files[i].first) + "'s file"));
  return Status::Ok();
}

StatusOr<uint64_t> ProtectorImpl::RestoreL3(uint64_t epoch) {
  if (!l3_->enabled())
    return Status::DataLoss(
        "no step can be restored from memory and there is no L3 checkpoint directory to fall "
        "back to");
  auto latest = LatestVersion(l3_->dir());
  if (!latest.ok())
    return Status::DataLoss("no step can be restored from memory and " + l3_->dir() +
                            " holds no complete L3 checkpoint: " + latest.status().ToString());
  if (!train_ || train_->epoch() != epoch) RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  RTFT_RETURN_IF_ERROR(PlaceShards());
  std::string objects;
  LiveView view(layout_, &objects);
  RestoreOptions r;
  r.version = *latest;
  // Objects are per rank (an RNG's state): this rank's own, where the version has its file.
  r.rank = train_->rank();
  const std::string what = "restoring L3 step " + std::to_string(*latest);
  RTFT_RETURN_IF_ERROR(Restore(l3_->dir(), r, view).Annotate(what));
  RTFT_RETURN_IF_ERROR(DeserializeObjects(layout_.objects, objects.data(), objects.size()));
  RTFT_RETURN_IF_ERROR(state_->Restored().Annotate(what));
  RTFT_RETURN_IF_ERROR(OpenL3());
  RTFT_LOG(kWarn, kLogRuntime) << "restored step " << *latest << " from the L3 checkpoint in "
                               << l3_->dir() << " (epoch " << epoch << ")";
  info_.epoch = epoch;
  info_.step = step_ = *latest;
  info_.source = "l3";
  info_.world_size = train_->world_size();
  return *latest;
}

}  // namespace rtft::protect
