// The facade: the state described, protection begun (a new job, a job started again from L3, or
// a process that joins a recovery), and the communicators and shard placement of each epoch.
#include "protect/protector.h"

#include <cstdint>
#include <filesystem>
#include <functional>

#include "core/logging.h"
#include "core/params.h"
#include "core/thread.h"

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
    std::lock_guard<std::mutex> lock(event_mu_);
    if (e.shutdown) {
      shutdown_event_ = e;
      shutdown_ = true;
    }
    if (e.epoch > event_epoch_) event_epoch_ = e.epoch;
    event_cv_.notify_all();
  });
}

ProtectorImpl::~ProtectorImpl() {
  rt_->Unsubscribe(listener_);
  capture_.reset();  // finishes a capture in flight
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

Status ProtectorImpl::Protect(std::shared_ptr<StateProvider> state, ResizeState resize) {
  if (phase_ != Phase::kDescribing)
    return Status::FailedPrecondition("describe the protected state before Start()");
  if (state_) return Status::FailedPrecondition("the protected state is described once");
  if (!state) return Status::InvalidArgument("Protect: no state");
  StateDescription d;
  RTFT_RETURN_IF_ERROR(state->Describe(&d).Annotate("describing the protected state"));
  RTFT_ASSIGN_OR_RETURN(layout_, Layout::Build(d, ObjectRoom()));
  state_ = std::move(state);
  resize_ = std::move(resize);
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

bool ProtectorImpl::Protected(uint64_t step) const {
  return o_.enabled && !paused_ && (!o_.protect_step || o_.protect_step(step));
}

Status ProtectorImpl::Open() {
  int64_t ms = o_.recovery_timeout.count();
  if (ms <= 0) {
    RTFT_ASSIGN_OR_RETURN(ms, ParamInt(Param::kCommCreateTimeoutMs));
  }
  recovery_timeout_ = milliseconds(std::max<int64_t>(ms, 1));
  device_ = o_.device >= 0 ? o_.device : rt_->info().device;
  RTFT_ASSIGN_OR_RETURN(int64_t streams, ParamInt(Param::kProtectL2Streams));
  if (streams < 1 || streams > 16)
    return Status::InvalidArgument("RTFT_PROTECT_L2_STREAMS=" + std::to_string(streams) +
                                   ": 1 to 16 connections per neighbour");
  l2_streams_ = static_cast<int>(streams);
  const std::string ckpt = o_.ckpt_dir.empty() ? ParamString(Param::kProtectCkptDir) : o_.ckpt_dir;
  int64_t every = o_.l3_every;
  if (every == 0) {
    RTFT_ASSIGN_OR_RETURN(every, ParamInt(Param::kProtectL3Every));
  }
  if (every > 0 && ckpt.empty())
    return Status::InvalidArgument("L3 every " + std::to_string(every) +
                                   " steps needs a checkpoint directory (ProtectOptions::ckpt_dir "
                                   "or RTFT_PROTECT_CKPT_DIR)");
  l3_ = std::make_unique<L3Writer>(ckpt, every > 0 ? every : 0, recovery_timeout_);
  RTFT_ASSIGN_OR_RETURN(dir_, ProtectDir(o_.shm_dir, &owned_dir_));
  if (rt_->info().role == RuntimeRole::kRestarted) RTFT_RETURN_IF_ERROR(AdoptOldLayout());
  if (!l1_) {
    RTFT_ASSIGN_OR_RETURN(l1_, Snapshot::Open(dir_, layout_));
  }
  RTFT_ASSIGN_OR_RETURN(l2_, ReplicaStore::Open(dir_));
  RTFT_ASSIGN_OR_RETURN(capture_, Capturer::Start(l1_.get()));
  stats_.state_bytes = layout_.objects_begin;
  RTFT_LOG(kInfo, kLogRuntime) << "protect: " << layout_.replicated.size() << " replicated, "
                               << layout_.sharded.size() << " sharded tensors, "
                               << layout_.objects.size() << " objects; snapshot of "
                               << FormatBytes(layout_.payload_bytes) << " in " << dir_;
  return Status::Ok();
}

// A process restarted in the middle of a shrink's recovery finds its snapshot laid out for the
// old world, its shards sized for it, while the application described shards sized for the new
// one: opened with the described layout, the snapshot would be thrown away. Rebuilt from the
// sizes the file records, the old layout opens it, and this rank takes part in the shrink as the
// survivor it is (docs/protect.md, "Shrink"). Until the shrink lays the state out again, the
// sharded entries describe the snapshot only (Shards::kOldWorldSnapshot).
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
    t.shape = {static_cast<int64_t>(bytes / size)};  // a flat view: only its bytes are used
    t.data = &snapshot_only;
  }
  if (!old.Finish(ObjectRoom()).ok() || old.hash != file->layout_hash) return Status::Ok();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> l1, Snapshot::Open(dir_, old));
  const std::vector<uint64_t> steps = l1->CompleteSteps();
  if (steps.empty()) return Status::Ok();  // nothing worth keeping: the described layout it is
  const AreaHeader* h = l1->header(steps.front());
  // Only a world that changed explains another layout; anything else starts over, as before.
  if (h->world <= 0 || h->rank < 0 || h->rank >= h->world || h->world == rt_->current().world_size)
    return Status::Ok();
  layout_ = std::move(old);
  l1_ = std::move(l1);
  held_rank_ = h->rank;
  held_world_ = h->world;
  shards_ = Shards::kOldWorldSnapshot;
  RTFT_LOG(kWarn, kLogRuntime) << "protect: this process's snapshot is laid out for rank "
                               << held_rank_ << " of " << held_world_
                               << " ranks (restarted while the job shrank): kept for the shrink";
  return Status::Ok();
}

StatusOr<uint64_t> ProtectorImpl::Start() {
  if (phase_ != Phase::kDescribing) return next_step_;
  if (!state_) return Status::FailedPrecondition("Protect(state) before Start()");
  RTFT_RETURN_IF_ERROR(Open());
  phase_ = Phase::kReady;
  const RuntimeInfo me = rt_->info();
  if (me.role != RuntimeRole::kInitial && me.role != RuntimeRole::kStandalone) {
    // A spare just activated, or a process restarted on its slot: it joins the recovery of the
    // epoch it was given (or of a later one, when another failure comes meanwhile).
    const auto t0 = Clock::now();
    RTFT_ASSIGN_OR_RETURN(next_step_, RecoverFrom(me.epoch, t0 + recovery_timeout_));
    info_.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return next_step_;
  }
  // A new job: what a slot's files hold is from no run of this job.
  for (uint64_t k = 0; k < 2; ++k) l1_->Invalidate(k);
  l2_->Clear();
  const uint64_t epoch = rt_->current().epoch;
  RTFT_RETURN_IF_ERROR(BuildComms(epoch));
  next_step_ = 0;
  if (!o_.enabled) return next_step_;
  // A job started again with its checkpoint directory resumes from the newest version.
  if (l3_->enabled() && LatestVersion(l3_->dir()).ok()) {
    RTFT_ASSIGN_OR_RETURN(next_step_, RestoreL3(epoch));
    return next_step_;
  }
  RTFT_RETURN_IF_ERROR(PlaceShards());
  RTFT_RETURN_IF_ERROR(OpenL3());
  return next_step_;
}

// The communicators of `epoch`: the training one over every rank, one per group of the grid
// (tensor, pipeline, data parallel) when the grid has more than one dimension, and the
// replication one over this rank's data-parallel group. Every group's name carries its
// coordinates, so that the groups of one epoch meet apart. They are made at once, each on a
// thread of its own (each meets its peers through the store and connects its pairs: about 30 ms
// each, one after the other, of a crash's recovery on two cores).
Status ProtectorImpl::BuildComms(uint64_t epoch) {
  replicator_.reset();
  tensor_.reset();
  pipeline_.reset();
  data_.reset();
  train_.reset();
  const RuntimeInfo now = rt_->current();
  if (now.epoch != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(now.epoch));
  RTFT_ASSIGN_OR_RETURN(GridMap grid, GridMap::Make(o_.grid, now.world_size));
  const GridPlace me = grid.of(now.rank);
  CommOptions train;
  train.backend = o_.backend;
  train.device = device_;
  train.create_timeout = recovery_timeout_;
  struct Made {
    std::unique_ptr<Communicator> comm;
    Status status;
  };
  std::vector<std::function<StatusOr<std::unique_ptr<Communicator>>()>> makers;
  makers.push_back([&] { return rt_->CreateCommunicator(o_.comm_name, train); });
  auto group = [&](const std::string& name, int rank, int size, CommBackend backend) {
    CommOptions o = train;
    o.backend = backend;
    makers.push_back([this, name = o_.comm_name + name, rank, size, o] {
      return rt_->CreateGroupCommunicator(name, rank, size, o);
    });
    return makers.size() - 1;
  };
  constexpr size_t kNone = SIZE_MAX;
  size_t tensor = kNone, pipeline = kNone, data = kNone;
  const std::string at = ".t" + std::to_string(me.t) + ".p" + std::to_string(me.p);
  if (!grid.flat()) {
    const std::string d = ".d" + std::to_string(me.d);
    if (me.tensor > 1)
      tensor = group(".tensor.p" + std::to_string(me.p) + d, me.t, me.tensor, o_.backend);
    if (me.pipeline > 1)
      pipeline = group(".pipeline.t" + std::to_string(me.t) + d, me.p, me.pipeline, o_.backend);
    if (me.data > 1) data = group(".data" + at, me.d, me.data, o_.backend);
  }
  std::vector<size_t> streams;
  if (me.data > 1 && o_.enabled) {
    const std::string name = grid.flat() ? ".replica" : ".replica" + at;
    for (int j = 0; j < l2_streams_; ++j)
      streams.push_back(group(j == 0 ? name : name + ".s" + std::to_string(j), me.d, me.data,
                              CommBackend::kGloo));
  }
  std::vector<Made> made(makers.size());
  auto make = [&](size_t i) {
    auto c = makers[i]();
    if (c.ok()) {
      made[i].comm = std::move(*c);
    } else {
      made[i].status = c.status();
    }
  };
  std::vector<Thread> threads;
  for (size_t i = 1; i < makers.size(); ++i) {
    auto t = Thread::Start("rtft-comm-make", [&make, i] { make(i); });
    if (t.ok()) {
      threads.push_back(std::move(*t));
    } else {
      make(i);  // no thread to give: made here
    }
  }
  make(0);
  for (Thread& t : threads) t.Join();
  for (const Made& m : made) {
    RTFT_RETURN_IF_ERROR(m.status);
    if (m.comm->epoch() != epoch)
      return Status::Aborted("the job moved on to epoch " + std::to_string(m.comm->epoch()));
  }
  train_ = std::move(made[0].comm);
  if (train_->rank() != now.rank || train_->world_size() != now.world_size)
    return Status::Aborted("the job's layout changed while its communicators were made");
  grid_ = grid;
  if (tensor != kNone) tensor_ = std::move(made[tensor].comm);
  if (pipeline != kNone) pipeline_ = std::move(made[pipeline].comm);
  if (data != kNone) data_ = std::move(made[data].comm);
  if (!streams.empty()) {
    std::vector<std::unique_ptr<Communicator>> replication;
    for (size_t i : streams) replication.push_back(std::move(made[i].comm));
    RTFT_ASSIGN_OR_RETURN(replicator_, Replicator::Start(std::move(replication), l1_.get(),
                                                         l2_.get(), replica_counters_));
  }
  return Status::Ok();
}

Status ProtectorImpl::OpenL3(L3Writer::When when) {
  return l3_->Open(train_->rank(), train_->world_size(), layout_.payload_bytes, when);
}

}  // namespace protect
}  // namespace rtft
