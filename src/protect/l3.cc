// L3 beyond the per-step writes (docs/protect.md, "Levels" and "Spares exhausted"): the checkpoint
// the survivors write when the job ends for want of spares, and the restore from the newest version
// when memory holds no step that every rank can resume from.
#include <algorithm>
#include <filesystem>

#include "core/logging.h"
#include "protect/l3_views.h"
#include "protect/recovery.h"
#include "runtime/gather.h"

namespace rtft::protect {
namespace {

// The survivors' agreement at checkpoint-and-exit (docs/protect.md, "Spares exhausted"): the
// rollback agreement's gather among the survivors alone, over the job's store (the coordinator's
// gather counts every rank of the epoch, and the lost ones send nothing). The lowest survivor
// leads: it reads every survivor's state, plans, and sends the plan; 3N operations on the store,
// each wait a request it holds for a second.
StatusOr<RecoveryPlan> AgreeFinal(const Parts& p, const GridMap& grid, uint64_t epoch, int me,
                                  const std::vector<bool>& lost) {
  const int n = static_cast<int>(lost.size());
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (!lost[r]) survivors.push_back(r);
  const auto at = std::find(survivors.begin(), survivors.end(), me);
  if (at == survivors.end())
    return Status::Internal("checkpoint-and-exit: this rank is not among the survivors");
  const int index = static_cast<int>(at - survivors.begin());
  const std::string key = "protect/final";
  RTFT_ASSIGN_OR_RETURN(KvGatherReply reply,
                        KvStoreGather(p.rt, key, epoch, static_cast<int>(survivors.size()), index,
                                      EncodeRankState(p.held->Mine(me)), /*all=*/false,
                                      p.settings->recovery_timeout, milliseconds(1000)));
  if (index != 0) {
    if (!reply.result) return Status::Internal("checkpoint-and-exit: no plan came");
    RTFT_ASSIGN_OR_RETURN(AgreedPlan agreed, DecodeAgreedPlan(*reply.result, n));
    if (agreed.shrink) return Status::Internal("checkpoint-and-exit: the leader sent a shrink");
    return agreed.plan;
  }
  if (reply.values.size() != survivors.size())
    return Status::Internal("checkpoint-and-exit: the gather lost a survivor's state");
  std::vector<RankState> all(n);
  for (int r = 0; r < n; ++r) all[r].rank = r;  // the lost ranks hold nothing
  for (size_t i = 0; i < survivors.size(); ++i)
    all[survivors[i]] = DecodeRankState(reply.values[i], survivors[i]);
  AgreedPlan agreed;
  agreed.plan = PlanRecovery(all, grid.DataGroups());
  // The others wait for this even when it failed: they then fail the same way.
  RTFT_RETURN_IF_ERROR(KvStoreGatherResult(p.rt, key, epoch, EncodeAgreedPlan(agreed)));
  return agreed.plan;
}

// One engine per file (a rank's own, or a lost rank's from its replica), all written at once.
Status WriteFiles(const Parts& p, uint64_t step, int world, uint64_t epoch,
                  const std::vector<std::pair<int, AreaView>>& files) {
  std::vector<std::unique_ptr<CheckpointEngine>> engines;
  for (const auto& [rank, view] : files) {
    RTFT_ASSIGN_OR_RETURN(auto engine, CheckpointEngine::Create(p.l3->Options(
                                           rank, world, p.held->layout.payload_bytes, epoch)));
    RTFT_RETURN_IF_ERROR(engine->Checkpoint(step, view));
    engines.push_back(std::move(engine));
  }
  for (size_t i = 0; i < engines.size(); ++i)
    RTFT_RETURN_IF_ERROR(engines[i]->WaitPersisted(step).Annotate(
        "checkpoint-and-exit: writing rank " + std::to_string(files[i].first) + "'s file"));
  return Status::Ok();
}

}  // namespace

// `--on-spares-exhausted checkpoint-and-exit`: the survivors agree on the newest step whose state
// is complete and write one L3 version of it, each its own file and the holder of each lost rank's
// replica that rank's file too, so the version is complete even when rank 0 is the one lost.
Status WriteFinalCheckpoint(const Parts& p, const Epoch& ep, const FailureEvent& e) {
  const Held& held = *p.held;
  const int world = ep.train->world_size(), me = ep.train->rank();
  std::vector<bool> lost(world, false);
  for (int f : e.failed_ranks)
    if (f >= 0 && f < world) lost[f] = true;
  RTFT_ASSIGN_OR_RETURN(const RecoveryPlan plan, AgreeFinal(p, ep.grid, e.epoch, me, lost));
  if (!plan.ok) return Status::DataLoss("checkpoint-and-exit: " + plan.why);
  const uint64_t step = plan.step;
  auto latest = LatestVersion(p.l3->dir());
  if (latest.ok() && *latest >= step) return Status::Ok();  // written already
  // Each file by its rank; the rows of the replicated tensors by the position in the
  // data-parallel group, and a replica's owner is a position there too.
  std::vector<std::pair<int, AreaView>> files;
  const char* area = held.l1->payload(step);
  const GridPlace at = ep.grid.of(me);
  files.emplace_back(
      me, OwnAreaView(held.layout, area, held.l1->header(step)->object_bytes, at.d, at.data));
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    if (plan.holder[i] != me) continue;
    const int lost = ep.grid.of(plan.needy[i]).d;
    const auto replica = held.l2->Find(lost, step);
    if (!replica) return Status::DataLoss("checkpoint-and-exit: the replica went missing");
    RTFT_ASSIGN_OR_RETURN(
        AreaView view,
        ReplicaAreaView(held.layout, held.table, area, held.l2->Data(step), replica->bytes, lost));
    files.emplace_back(plan.needy[i], std::move(view));
  }
  RTFT_RETURN_IF_ERROR(WriteFiles(p, step, world, e.epoch, files));
  RTFT_LOG(kWarn, kLogRuntime) << "checkpoint-and-exit: step " << step << " written to "
                               << p.l3->dir() << " (" << files.size() << " file(s) by this rank)";
  return Status::Ok();
}

std::optional<uint64_t> NewestL3Version(const Parts& p, uint64_t at_most) {
  if (!p.l3->enabled()) return std::nullopt;
  auto versions = ListVersions(p.l3->dir());
  if (!versions.ok()) return std::nullopt;
  std::optional<uint64_t> newest;
  for (const VersionInfo& v : *versions)  // oldest first
    if (v.complete && v.version <= at_most) newest = v.version;
  return newest;
}

StatusOr<std::optional<uint64_t>> ResumeVersion(const Parts& p, Settings::ResumeFrom want) {
  using Resume = std::optional<uint64_t>;
  if (!p.l3->enabled() || want == Settings::ResumeFrom::kLatest) return Resume();
  const StatusOr<uint64_t> latest = LatestVersion(p.l3->dir());
  if (latest.status().code() == StatusCode::kNotFound) return Resume();  // nothing committed
  RTFT_ASSIGN_OR_RETURN(const std::vector<VersionInfo> versions, ListVersions(p.l3->dir()));
  const bool agreed = want == Settings::ResumeFrom::kAgreed;
  Resume pick;
  const VersionInfo* newest = nullptr;
  size_t complete = 0;
  for (const VersionInfo& v : versions) {  // oldest first
    if (!v.complete || (latest.ok() && v.version > *latest)) continue;
    ++complete;
    newest = &v;
    if (agreed ? v.marks.checked && v.marks.agreed : v.marks.replayed) pick = v.version;
  }
  if (newest == nullptr || pick) return pick;
  const VersionMarks& m = newest->marks;
  const std::string marks = std::string(!m.checked ? "copies not compared"
                                        : m.agreed ? "copies agreed"
                                                   : "copies DISAGREED") +
                            (m.replayed ? ", replayed" : ", not replayed");
  return Status::FailedPrecondition(
      "RTFT_PROTECT_RESUME_FROM=" + std::string(agreed ? "agreed" : "replayed") + ": none of the " +
      std::to_string(complete) + " complete L3 version(s) in " + p.l3->dir() + " is " +
      (agreed ? "marked agreed (its replicated copies compared and equal)"
              : "marked replayed (its step checked by a replay)") +
      "; the newest, " + std::to_string(newest->version) + ", has " + marks +
      ": resume from it with RTFT_PROTECT_RESUME_FROM=latest, or move the directory away to start "
      "at step 0");
}

void WithdrawVersionsAfterLatest(const Parts& p) {
  if (!p.l3->enabled()) return;
  const StatusOr<uint64_t> latest = LatestVersion(p.l3->dir());
  if (!latest.ok()) return;
  const auto versions = ListVersions(p.l3->dir());
  if (!versions.ok()) return;
  for (const VersionInfo& v : *versions) {
    if (v.version <= *latest) continue;
    std::error_code ec;
    std::filesystem::remove_all(v.path, ec);
    if (ec) {
      RTFT_LOG(kWarn, kLogRuntime) << "L3: cannot remove version " << v.version << " (" << v.path
                                   << "), newer than LATEST " << *latest << ": " << ec.message();
    } else {
      RTFT_LOG(kWarn, kLogRuntime)
          << "L3: removed version " << v.version << " (" << (v.complete ? "complete" : "incomplete")
          << "), newer than LATEST " << *latest
          << ": an earlier run's, which this one writes again";
    }
  }
}

StatusOr<uint64_t> RestoreL3(const Parts& p, Epoch* e, uint64_t epoch, RecoveryInfo* info,
                             std::optional<uint64_t> version) {
  Held& held = *p.held;
  if (!p.l3->enabled())
    return Status::DataLoss(
        "no step can be restored from memory and there is no L3 checkpoint directory to fall "
        "back to");
  if (!version)
    return Status::DataLoss("no step can be restored from memory and " + p.l3->dir() +
                            " holds no complete L3 checkpoint");
  if (!e->train || e->train->epoch() != epoch) RTFT_RETURN_IF_ERROR(e->Build(p, epoch));
  RTFT_RETURN_IF_ERROR(held.PlaceShards(*e));
  std::string objects;
  LiveView view(held.layout, &objects);
  RestoreOptions r;
  r.version = *version;
  // Objects are per rank (an RNG's state): this rank's own, where the version has its file.
  r.rank = e->train->rank();
  const std::string what = "restoring L3 step " + std::to_string(*version);
  RTFT_RETURN_IF_ERROR(Restore(p.l3->dir(), r, view).Annotate(what));
  RTFT_RETURN_IF_ERROR(DeserializeObjects(held.layout.objects, objects.data(), objects.size()));
  RTFT_RETURN_IF_ERROR(held.state->Restored().Annotate(what));
  RTFT_RETURN_IF_ERROR(e->OpenL3(p));
  RTFT_LOG(kWarn, kLogRuntime) << "restored step " << *version << " from the L3 checkpoint in "
                               << p.l3->dir() << " (epoch " << epoch << ")";
  info->epoch = epoch;
  info->step = *version;
  info->source = "l3";
  info->world_size = e->train->world_size();
  return *version;
}

}  // namespace rtft::protect
