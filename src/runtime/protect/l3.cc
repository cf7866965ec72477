// L3 (docs/protect.md, "L3"): every K steps the L1 snapshot of a step is written by the
// checkpoint engine straight from L1 memory, each rank writing its 1/N rows of every replicated
// tensor and its own shards (as slices of one tensor in rank order), so the files hold one copy of
// the parameters. Restoring reassembles them with the engine's resharding. A job started with a
// checkpoint directory resumes from its newest version; a recovery that finds no step in L1 and
// L2 falls back to it.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/logging.h"
#include "core/params.h"
#include "runtime/protect/protector_impl.h"

namespace rtft::protect {
namespace {

// Rows [begin, end) of a tensor's first dimension that `rank` of `world` writes.
std::pair<int64_t, int64_t> Rows(int64_t rows, int world, int rank) {
  const int64_t base = rows / world, extra = rows % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

// One rank's shard of a sharded tensor, wherever its bytes are (L1, or an L2 replica).
struct ShardBytes {
  const TensorDesc* tensor;  // name and type
  int64_t count = 0;
  const char* data = nullptr;
  ShardPlace place;
};

// One step of one rank's state as the engine sees it: its rows of every replicated tensor (from
// any rank's L1 area: they are equal everywhere), its shards, its serialized objects.
class AreaView final : public StateProvider {
 public:
  AreaView(const Layout& layout, const char* replicated_area, std::vector<ShardBytes> shards,
           std::string objects, int rank, int world)
      : layout_(layout),
        area_(replicated_area),
        shards_(std::move(shards)),
        objects_(std::move(objects)),
        rank_(rank),
        world_(world) {}

  Status Describe(StateDescription* out) const override {
    for (const Entry& e : layout_.replicated) {
      const TensorDesc& t = e.tensor;
      if (t.shape.empty()) {
        if (rank_ == 0) out->tensors.push_back(Slice(t, area_ + e.offset, t.shape, {}, {}));
        continue;
      }
      const auto [begin, end] = Rows(t.shape[0], world_, rank_);
      if (end <= begin) continue;
      const size_t row_bytes = t.shape[0] > 0 ? e.bytes / t.shape[0] : 0;
      std::vector<int64_t> shape = t.shape, offset(t.shape.size(), 0);
      shape[0] = end - begin;
      offset[0] = begin;
      out->tensors.push_back(
          Slice(t, area_ + e.offset + begin * row_bytes, shape, t.shape, offset));
    }
    for (const ShardBytes& b : shards_)
      out->tensors.push_back(
          Slice(*b.tensor, b.data, {b.count}, {b.place.global}, {b.place.offset}));
    const std::string objects = objects_;
    out->objects.push_back(
        {kObjectsName, [objects] { return StatusOr<std::string>(objects); }, nullptr});
    return Status::Ok();
  }

 private:
  static TensorDesc Slice(const TensorDesc& t, const char* data, std::vector<int64_t> shape,
                          std::vector<int64_t> global, std::vector<int64_t> offset) {
    TensorDesc d;
    d.name = t.name;
    d.dtype = t.dtype;
    d.shape = std::move(shape);
    d.data = const_cast<char*>(data);
    d.memory = MemoryKind::kHost;
    d.shard.global_shape = std::move(global);
    d.shard.offset = std::move(offset);
    return d;
  }

  const Layout& layout_;
  const char* area_;
  std::vector<ShardBytes> shards_;
  std::string objects_;
  int rank_, world_;
};

// The live state as Restore fills it: every replicated tensor whole (assembled from every rank's
// rows), this rank's shards, and the objects' blob.
class LiveView final : public StateProvider {
 public:
  LiveView(const Layout& layout, const std::vector<ShardPlace>& places, std::string* objects)
      : layout_(layout), places_(places), objects_(objects) {}
  Status Describe(StateDescription* out) const override {
    for (const Entry& e : layout_.replicated) {
      TensorDesc d = e.tensor;
      if (!d.shape.empty()) {
        d.shard.global_shape = d.shape;
        d.shard.offset.assign(d.shape.size(), 0);
      }
      out->tensors.push_back(d);
    }
    for (size_t i = 0; i < layout_.sharded.size(); ++i) {
      TensorDesc d = layout_.sharded[i].tensor;
      d.shape = {static_cast<int64_t>(d.elements())};
      d.shard.global_shape = {places_[i].global};
      d.shard.offset = {places_[i].offset};
      out->tensors.push_back(d);
    }
    std::string* objects = objects_;
    out->objects.push_back({kObjectsName, nullptr, [objects](const std::string& b) {
                              *objects = b;
                              return Status::Ok();
                            }});
    return Status::Ok();
  }

 private:
  const Layout& layout_;
  const std::vector<ShardPlace>& places_;
  std::string* objects_;
};

}  // namespace

Status ProtectorImpl::ResolveL3() {
  ckpt_dir_ = o_.ckpt_dir.empty() ? ParamString(Param::kProtectCkptDir) : o_.ckpt_dir;
  int64_t every = o_.l3_every;
  if (every == 0) {
    RTFT_ASSIGN_OR_RETURN(every, ParamInt(Param::kProtectL3Every));
  }
  l3_every_ = every > 0 ? static_cast<uint64_t>(every) : 0;
  if (l3_every_ > 0 && ckpt_dir_.empty())
    return Status::InvalidArgument("L3 every " + std::to_string(l3_every_) +
                                   " steps needs a checkpoint directory (ProtectOptions::ckpt_dir "
                                   "or RTFT_PROTECT_CKPT_DIR)");
  return Status::Ok();
}

// Where each shard sits in its tensor's concatenation over the ranks, from every rank's sizes.
Status ProtectorImpl::PlaceShards() {
  const size_t n = layout_.sharded.size();
  places_.assign(n, ShardPlace());
  const int world = train_ ? train_->world_size() : 1;
  const int rank = train_ ? train_->rank() : 0;
  counts_.assign(world, std::vector<int64_t>(n));
  held_rank_ = -1;
  held_world_ = 0;
  std::vector<int64_t> mine(n);
  for (size_t i = 0; i < n; ++i)
    mine[i] = static_cast<int64_t>(layout_.sharded[i].tensor.elements());
  std::vector<int64_t> all(n * world);
  if (world > 1 && n > 0) {
    if (!replicator_) return Status::Internal("placing shards without a replication communicator");
    RTFT_RETURN_IF_ERROR(replicator_->comm()->AllGather(mine.data(), all.data(), n, DType::kInt64));
  } else {
    all = mine;
  }
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < world; ++r) {
      counts_[r][i] = all[r * n + i];
      if (r < rank) places_[i].offset += all[r * n + i];
      places_[i].global += all[r * n + i];
    }
  }
  held_rank_ = rank;
  held_world_ = world;
  return Status::Ok();
}

CheckpointOptions ProtectorImpl::L3Options(int rank, int world) const {
  CheckpointOptions c;
  c.dir = ckpt_dir_;
  c.rank = rank;
  c.world_size = world;
  // A commit waiting for a rank that died is abandoned with its engine at the next recovery; it
  // then gives up after this long in the background.
  c.commit_timeout = recovery_timeout_;
  // The protected state is in host memory (Layout::Finish): no CUDA context for it. A process
  // with one takes tens of milliseconds longer to die, which is time before its crash is seen.
  c.pin_pool = false;
  // Sized by the snapshot, not by the node, unless the user chose: one step's state fits, and the
  // pool is allocated when the engine is created, so recovery does not wait for a large one.
  if (!ParamIsSet(Param::kCkptPoolBytes)) {
    const uint64_t mib = 1ull << 20;
    const uint64_t chunk =
        std::clamp<uint64_t>((layout_.payload_bytes / 4 + mib - 1) / mib * mib, mib, 64 * mib);
    c.chunk_bytes = chunk;
    c.flush_threads = 2;
    c.pool_bytes = std::max<uint64_t>(4 * chunk, (layout_.payload_bytes + mib - 1) / mib * mib);
  }
  return c;
}

Status ProtectorImpl::OpenL3() {
  if (ckpt_dir_.empty()) return Status::Ok();
  RetireL3();
  RTFT_ASSIGN_OR_RETURN(l3_,
                        CheckpointEngine::Create(L3Options(train_->rank(), train_->world_size())));
  return Status::Ok();
}

// An engine whose versions may wait for a rank that is gone: its commits are abandoned and it is
// destroyed on a thread of its own (its destructor waits for files still being written), never
// on recovery's path.
void ProtectorImpl::RetireL3() {
  if (!l3_) return;
  // Its copy out of L1 is local and short: let it finish before the areas change again.
  if (l3_pending_ != kNoStep) (void)l3_->WaitCaptured(l3_pending_);
  // A commit waiting for a lost rank's file ends now, not at its timeout.
  l3_->Abandon();
  std::thread([engine = std::shared_ptr<CheckpointEngine>(std::move(l3_))]() mutable {
    engine.reset();
  }).detach();
  l3_pending_ = kNoStep;
}

Status ProtectorImpl::MaybeCheckpoint(uint64_t step, bool now) {
  if (!l3_ || (!now && (l3_every_ == 0 || step == 0 || step % l3_every_ != 0))) return Status::Ok();
  if (!l1_->Verify(step)) return Status::Ok();  // no complete snapshot of it: nothing to write
  if (l3_pending_ != kNoStep) RTFT_RETURN_IF_ERROR(l3_->WaitCaptured(l3_pending_));
  const Status s = l3_->Checkpoint(step, *OwnView(step));
  if (!s.ok()) {
    RTFT_LOG(kError, kLogRuntime) << "L3 checkpoint of step " << step << ": " << s;
    return s.code() == StatusCode::kAborted ? s : Status::Ok();
  }
  l3_pending_ = step;
  RTFT_LOG(kInfo, kLogRuntime) << "L3: step " << step << " is being written to " << ckpt_dir_;
  return Status::Ok();
}

std::unique_ptr<StateProvider> ProtectorImpl::OwnView(uint64_t step) const {
  const char* area = l1_->payload(step);
  std::vector<ShardBytes> shards;
  for (size_t i = 0; i < layout_.sharded.size(); ++i) {
    const Entry& e = layout_.sharded[i];
    shards.push_back(
        {&e.tensor, static_cast<int64_t>(e.tensor.elements()), area + e.offset, places_[i]});
  }
  return std::make_unique<AreaView>(
      layout_, area, std::move(shards),
      std::string(area + layout_.objects_begin, l1_->header(step)->object_bytes), train_->rank(),
      train_->world_size());
}

// Rank `lost`'s step as its replica (on this rank, its right neighbour) holds it: its shards laid
// out as that rank laid them out (4 KiB aligned, in declaration order), then its objects.
StatusOr<std::unique_ptr<StateProvider>> ProtectorImpl::ReplicaView(uint64_t step, int lost) const {
  if (lost < 0 || static_cast<size_t>(lost) >= counts_.size())
    return Status::Internal("no shard sizes for rank " + std::to_string(lost));
  uint64_t bytes = 0;
  for (const auto& h : l2_->Complete())
    if (h.owner == lost && h.step == step) bytes = h.bytes;
  if (bytes == 0)
    return Status::DataLoss("this rank holds no replica of rank " + std::to_string(lost) +
                            "'s step " + std::to_string(step));
  const char* data = l2_->Data(step);
  std::vector<ShardBytes> shards;
  size_t at = 0;
  for (size_t i = 0; i < layout_.sharded.size(); ++i) {
    const TensorDesc& t = layout_.sharded[i].tensor;
    const int64_t count = counts_[lost][i];
    ShardPlace place;
    for (int r = 0; r < static_cast<int>(counts_.size()); ++r) {
      if (r < lost) place.offset += counts_[r][i];
      place.global += counts_[r][i];
    }
    shards.push_back({&t, count, data + at, place});
    at = AlignUp(at + count * DTypeSize(t.dtype));
  }
  if (at > bytes) return Status::DataLoss("rank " + std::to_string(lost) + "'s replica is short");
  return std::unique_ptr<StateProvider>(new AreaView(layout_, l1_->payload(step), std::move(shards),
                                                     std::string(data + at, bytes - at), lost,
                                                     static_cast<int>(counts_.size())));
}

Status ProtectorImpl::WaitL3Area(uint64_t step) {
  // The capture of `step` overwrites the area of step - 2: the engine must have copied it.
  if (l3_ && l3_pending_ != kNoStep && l3_pending_ + 2 == step) {
    const Status s = l3_->WaitCaptured(l3_pending_);
    if (!s.ok())
      RTFT_LOG(kError, kLogRuntime) << "L3 checkpoint of step " << l3_pending_ << ": " << s;
    l3_pending_ = kNoStep;
  }
  return Status::Ok();
}

Status ProtectorImpl::FinalCheckpoint() {
  FailureEvent e;
  {
    std::lock_guard<std::mutex> lock(event_mu_);
    if (!shutdown_event_) return Status::Internal("no shutdown event");
    e = *shutdown_event_;
  }
  if (ckpt_dir_.empty())
    return Status::FailedPrecondition(
        "checkpoint-and-exit: no checkpoint directory (ProtectOptions::ckpt_dir or "
        "RTFT_PROTECT_CKPT_DIR) to write to");
  if (!train_ || (counts_.empty() && !layout_.sharded.empty()))
    return Status::FailedPrecondition("checkpoint-and-exit before protection started");
  (void)JoinCapture();
  replicator_.reset();
  RetireL3();
  const int world = train_->world_size(), me = train_->rank();
  std::vector<bool> lost(world, false);
  for (int f : e.failed_ranks)
    if (f >= 0 && f < world) lost[f] = true;
  // What every survivor holds, through the store (the lost ranks hold nothing).
  RankState mine;
  mine.rank = me;
  mine.layout_hash = layout_.replicated_hash;
  mine.l1 = l1_->CompleteSteps();
  for (const auto& h : l2_->Complete()) mine.l2.emplace_back(h.owner, h.step);
  const std::string prefix = "protect/final/e" + std::to_string(e.epoch) + "/rank/";
  RTFT_RETURN_IF_ERROR(rt_->KvPut(prefix + std::to_string(me), EncodeRankState(mine)));
  std::vector<RankState> all(world);
  for (int r = 0; r < world; ++r) {
    all[r].rank = r;
    if (lost[r]) continue;
    auto v = rt_->KvGet(prefix + std::to_string(r), recovery_timeout_);
    if (!v.ok()) return v.status().Annotate("checkpoint-and-exit: rank " + std::to_string(r));
    all[r] = DecodeRankState(*v, r);
  }
  const RecoveryPlan plan = PlanRecovery(all, layout_.replicated_hash);
  if (!plan.ok) return Status::DataLoss("checkpoint-and-exit: " + plan.why);
  const uint64_t step = plan.step;
  auto latest = LatestVersion(ckpt_dir_);
  if (latest.ok() && *latest >= step) return Status::Ok();  // written already
  // This rank's file, and those of the lost ranks whose replica it holds (a lost rank 0's too:
  // its engine commits the version once every file is there).
  std::vector<std::pair<int, std::unique_ptr<StateProvider>>> files;
  files.emplace_back(me, OwnView(step));
  for (size_t i = 0; i < plan.needy.size(); ++i) {
    if (plan.holder[i] != me) continue;
    RTFT_ASSIGN_OR_RETURN(auto view, ReplicaView(step, plan.needy[i]));
    files.emplace_back(plan.needy[i], std::move(view));
  }
  std::vector<std::unique_ptr<CheckpointEngine>> engines;
  for (auto& [rank, view] : files) {
    RTFT_ASSIGN_OR_RETURN(auto engine, CheckpointEngine::Create(L3Options(rank, world)));
    RTFT_RETURN_IF_ERROR(engine->Checkpoint(step, *view));
    engines.push_back(std::move(engine));
  }
  for (size_t i = 0; i < engines.size(); ++i)
    RTFT_RETURN_IF_ERROR(engines[i]->WaitPersisted(step).Annotate(
        "checkpoint-and-exit: writing rank " + std::to_string(files[i].first) + "'s file"));
  RTFT_LOG(kWarn, kLogRuntime) << "checkpoint-and-exit: step " << step << " written to "
                               << ckpt_dir_ << " (" << files.size() << " file(s) by this rank)";
  return Status::Ok();
}

Status ProtectorImpl::CheckpointNow() {
  if (!started_) return Status::FailedPrecondition("Protector::Start() first");
  if (ckpt_dir_.empty())
    return Status::FailedPrecondition(
        "no checkpoint directory (ProtectOptions::ckpt_dir or "
        "RTFT_PROTECT_CKPT_DIR)");
  RTFT_RETURN_IF_ERROR(JoinCapture());
  if (!l3_) RTFT_RETURN_IF_ERROR(OpenL3());
  RTFT_RETURN_IF_ERROR(MaybeCheckpoint(step_, /*now=*/true));
  if (l3_pending_ != step_) return Status::FailedPrecondition("no complete snapshot to write");
  return l3_->WaitPersisted(step_);
}

StatusOr<uint64_t> ProtectorImpl::RestoreL3(uint64_t epoch) {
  if (ckpt_dir_.empty())
    return Status::DataLoss(
        "no step can be restored from memory and there is no L3 checkpoint "
        "directory to fall back to");
  auto latest = LatestVersion(ckpt_dir_);
  if (!latest.ok())
    return Status::DataLoss("no step can be restored from memory and " + ckpt_dir_ +
                            " holds no complete L3 checkpoint: " + latest.status().ToString());
  if (!train_ || train_->epoch() != epoch) RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  RTFT_RETURN_IF_ERROR(PlaceShards());
  std::string objects;
  LiveView view(layout_, places_, &objects);
  RestoreOptions r;
  r.version = *latest;
  RTFT_RETURN_IF_ERROR(
      Restore(ckpt_dir_, r, view).Annotate("restoring L3 step " + std::to_string(*latest)));
  RTFT_RETURN_IF_ERROR(DeserializeObjects(layout_.objects, objects.data(), objects.size()));
  RTFT_RETURN_IF_ERROR(OpenL3());
  RTFT_LOG(kWarn, kLogRuntime) << "restored step " << *latest << " from the L3 checkpoint in "
                               << ckpt_dir_ << " (epoch " << epoch << ")";
  info_.step = *latest;
  info_.source = "l3";
  step_ = *latest;
  return *latest;
}

}  // namespace rtft::protect
