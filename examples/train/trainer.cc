#include "trainer.h"

#include <sys/resource.h>
#include <sys/time.h>
#include <xxhash.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "blocking_save.h"
#include "rtft/testing.h"

namespace train {
namespace {

using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;

// torch.optim.AdamW on one shard (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01).
void AdamW(float* p, float* m, float* v, const float* g, size_t n, uint64_t step) {
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  const double t = static_cast<double>(step + 1);
  const float bc1 = static_cast<float>(1.0 - std::pow(0.9, t));
  const float bc2 = static_cast<float>(1.0 - std::pow(0.999, t));
  for (size_t i = 0; i < n; ++i) {
    p[i] *= 1.0f - lr * wd;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
  }
}

rtft::TensorDesc Shard(const char* name, size_t n, int world, int rank, float* data) {
  rtft::TensorDesc t = rtft::EvenShard(name, DType::kFloat32, {int64_t(n)}, world, rank);
  t.data = data;
  return t;
}

}  // namespace

double WallSeconds() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return tv.tv_sec + tv.tv_usec * 1e-6;
}

// CPU time of the whole process (every thread: the protection's capture and replication too).
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string Timing::Mean(double sum) const {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6f", steps ? sum / steps : 0.0);
  return text;
}

Trainer::Trainer(const Options& o, rtft::Runtime* rt) : o_(o), rt_(rt) { shape_.hidden = o.hidden; }

Trainer::~Trainer() {
  if (listener_ != 0) rt_->Unsubscribe(listener_);
}

void Trainer::Say(const std::string& line) const {
  std::printf("[train %d] %s t=%.3f\n", rank_, line.c_str(), WallSeconds());
  std::fflush(stdout);
}

int Trainer::Fail(const char* what, const Status& s) const {
  std::fprintf(stderr, "[train %d] %s: %s\n", rank_, what, s.ToString().c_str());
  return 1;
}

void Trainer::Report(const rtft::RecoveryInfo& r) const {
  char line[320];
  std::snprintf(line, sizeof(line),
                "recovered epoch=%" PRIu64 " step=%" PRIu64
                " world=%d source=%s fed=%d bytes=%" PRIu64
                " event_s=%.3f agree_s=%.3f rebuild_s=%.3f transfer_s=%.3f took_s=%.3f"
                " cuda_init_s=%.3f",
                r.epoch, r.step, r.world_size, r.source.c_str(), r.ranks_fed, r.bytes_moved,
                r.wait_event_s, r.agree_s, r.rebuild_s, r.transfer_s, r.total_s, cuda_init_s_);
  Say(line);
}

// Test hook: this rank's named fault points (docs/testing.md). A process restarted or activated
// later does not arm them again.
void Trainer::ArmFaults(int rank) const {
  std::string mine;
  size_t at = 0;
  while (at < o_.fault.size()) {
    const size_t end = std::min(o_.fault.find(',', at), o_.fault.size());
    const std::string item = o_.fault.substr(at, end - at);
    at = end + 1;
    const size_t colon = item.find(':');
    if (colon == std::string::npos || std::atoi(item.c_str()) != rank) continue;
    mine += (mine.empty() ? "" : ",") + item.substr(colon + 1);
  }
  if (!mine.empty()) rtft::ArmFaults(mine.c_str());
}

std::vector<size_t> Trainer::Counts(int world) const {
  std::vector<size_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = rtft::SplitEvenly(int64_t(n_), world, r).count;
  return counts;
}

rtft::StatusOr<std::shared_ptr<rtft::StateProvider>> Trainer::Describe(int world, int rank) {
  rank_ = rank;
  // A partition's tensors are named after it; its optimizer state is spread over its
  // data-parallel group (the whole world without --tp/--pp).
  std::string prefix;
  if (o_.grid()) {
    auto at = rtft::PlaceInGrid({o_.tp, o_.pp, {}}, world, rank);
    if (!at.ok()) return at.status();
    GridShape shape;
    shape.hidden = o_.hidden;
    shape.batch = o_.batch;
    shape.micro = o_.micro;
    block_ = std::make_unique<GridBlock>(shape, *at, o_.seed);
    n_ = block_->params();
    grad_.resize(n_);
    prefix = "p" + std::to_string(at->p) + ".t" + std::to_string(at->t) + "/";
    world = at->data;
    rank = at->d;
    if (o_.shared_shards) {  // every partition of a stage holds as many parameters
      shared_.global_shape = {int64_t(n_) * at->tensor};
      shared_.offset = {int64_t(n_) * at->t};
      shared_.replicated = true;
      shared_name_ = "p" + std::to_string(at->p) + "/params";
    }
  }
  shard_ = rtft::SplitEvenly(int64_t(n_), world, rank);
  grad_shard_.assign(shard_.count, 0.0f);
  auto state = std::make_shared<rtft::CompositeProvider>();
  if (gpu_) {
    RTFT_RETURN_IF_ERROR(DescribeGpu(state.get(), world, rank));
  } else {
    rtft::TensorDesc params{prefix + "params", DType::kFloat32, {int64_t(n_)}, Params()};
    if (shared_.replicated) {
      params.name = shared_name_;
      params.shard = shared_;
    }
    state->AddTensor(params);
    if (o_.buffers) {
      // 2 MiB: more than the objects' room, so a holder that did not count it refuses the replica.
      running_.assign(size_t{1} << 19, 0.0f);
      rtft::TensorDesc running{
          prefix + "running", DType::kFloat32, {int64_t(running_.size())}, running_.data()};
      running.changed_in_compute = true;
      state->AddTensor(running);
    }
  }
  if (gpu_) {
    // DescribeGpu added the optimizer.
  } else if (o_.offload) {
    rtft::OffloadParam p;
    p.name = "params";
    p.data = params_.data() + shard_.offset;
    p.elements = shard_.count;
    p.shard = Shard("params", n_, world, rank, nullptr).shard;
    rtft::OffloadOptions oo;
    oo.mode = rtft::OffloadMode::kCpu;
    auto optimizer = rtft::OffloadOptimizer::Create({p}, oo);
    if (!optimizer.ok()) return optimizer.status();
    optimizer_ = std::move(*optimizer);
    state->Add(optimizer_->state_provider());
  } else {
    m_.assign(shard_.count, 0.0f);
    v_.assign(shard_.count, 0.0f);
    state->AddTensor(Shard((prefix + "adam_m").c_str(), n_, world, rank, m_.data()));
    state->AddTensor(Shard((prefix + "adam_v").c_str(), n_, world, rank, v_.data()));
  }
  state->AddObject({"loss_ema",
                    [this] {
                      return rtft::StatusOr<std::string>(
                          std::string(reinterpret_cast<const char*>(&loss_ema_), 8));
                    },
                    [this](const std::string& b) {
                      if (b.size() != 8) return Status::DataLoss("loss_ema: 8 bytes expected");
                      std::memcpy(&loss_ema_, b.data(), 8);
                      return Status::Ok();
                    }});
  state_ = state;
  return state_;
}

// From one step's compute to the next's: each step's whole cycle, protection's bracket included.
// The first three steps (warm-up) and the first step of each block (it waits for the last
// protected step's replica, or does not) are left out.
void Trainer::Time(const rtft::StepContext& ctx) {
  const double wall = WallSeconds(), cpu = CpuSeconds();
  if (!started_) {
    started_ = true;
    first_step_ = ctx.step;
  } else if (ctx.recovered == nullptr && ctx.step == last_step_ + 1) {
    const uint64_t s = last_step_;
    const uint64_t b = o_.protect_blocks;
    const bool prot = b == 0 || (s / b) % 2 == 0;
    if (s >= first_step_ + 3 && (b == 0 || s % b != 0)) {
      timing_[prot].wall_s += wall - last_wall_;
      timing_[prot].cpu_s += cpu - last_cpu_;
      ++timing_[prot].steps;
    }
  }
  last_step_ = ctx.step;
  last_wall_ = wall;
  last_cpu_ = cpu;
}

Status Trainer::Failed(const rtft::StepContext& ctx, const Status& s) {
  if (s.ok()) return s;
  char line[320];
  std::snprintf(line, sizeof(line), "failure step=%" PRIu64 " after=%.3f what=%s", ctx.step,
                WallSeconds() - last_wall_, s.message().c_str());
  Say(line);
  return s;
}

// What each step's first function does first: the start line, the recovery's report, the clock.
void Trainer::Prologue(rtft::StepContext& ctx) {
  if (!started_) {
    const std::string device =
        gpu_ ? "cuda:" + std::to_string(gpu_->device()) + "/" + o_.comm : std::string("cpu");
    char line[320];
    std::snprintf(line, sizeof(line),
                  "start role=%s rank=%d world=%d epoch=%" PRIu64 " step=%" PRIu64
                  " params=%zu device=%s",
                  rtft::RuntimeRoleName(rt_->info().role), ctx.rank, ctx.world_size, ctx.epoch,
                  ctx.step, n_, device.c_str());
    Say(line);
  }
  if (ctx.recovered) Report(*ctx.recovered);
  Time(ctx);
  // Test hooks: "train.compute_start:wait=PATH" holds the step's compute until PATH exists (the
  // capture's "protect.l1_copied:touch=PATH" makes it once the step's snapshot is copied);
  // "train.stuck_flip:flag" then flips a bit of this rank's copy of a replicated parameter, which
  // the compute reads, and the bit stays flipped past the update (whose all-gather rewrites the
  // word), as it would in a trainer that updates its own full copy, DDP's (docs/protect.md,
  // "Silent data corruption").
  if (gpu_) return;
  rtft::FaultPoint("train.compute_start");
  if (n_ > 0 && rtft::FaultFlag("train.stuck_flip")) {
    FlipBit();
    stuck_step_ = ctx.step;
  }
}

Status Trainer::Compute(rtft::StepContext& ctx) {
  Prologue(ctx);
  if (gpu_) return Failed(ctx, ComputeGpu(ctx));
  ctx.data_rank = block_ ? ctx.place.d : ctx.rank;
  const Status s = LocalGradients(ctx);
  if (!s.ok()) return Failed(ctx, s);
  return Reduce(ctx);
}

// StepFns::local (the replay of steps, RTFT_PROTECT_REPLAY_EVERY): forward and backward on the
// data of ctx.data_rank, no data-parallel collective (--tp/--pp: the block's tensor and pipeline
// collectives, which the whole replica runs together). A replay of a peer's step changes no clock
// or line.
Status Trainer::Local(rtft::StepContext& ctx) {
  if (!ctx.replaying) Prologue(ctx);
  const Status s = LocalGradients(ctx);
  if (!s.ok()) return Failed(ctx, s);
  ctx.gradients = grad_.data();
  ctx.gradient_bytes = grad_.size() * sizeof(float);
  ctx.gradient_dtype = DType::kFloat32;
  return Status::Ok();
}

Status Trainer::LocalGradients(rtft::StepContext& ctx) {
  if (block_) {
    RTFT_RETURN_IF_ERROR(block_->Step(ctx, o_.seed, &grad_, &loss_));
  } else {
    // Test hook: "train.compute:repeat=F" makes this rank slow (the same bits, F times the work).
    const int repeats = ctx.replaying ? 1 : rtft::FaultRepeats("train.compute");
    for (int i = 0; i < repeats; ++i) {
      MakeBatch(shape_, o_.seed, ctx.step, ctx.data_rank, o_.batch, &x_, &y_);
      loss_ = LossAndGradient(shape_, params_.data(), x_, y_, o_.batch, grad_.data());
    }
  }
  // Test hook: "train.grad_flip:flag" flips a bit of this rank's own gradients (a faulty SM).
  if (!ctx.replaying && !grad_.empty() && rtft::FaultFlag("train.grad_flip")) {
    uint32_t bits;
    std::memcpy(&bits, &grad_[0], sizeof(bits));
    bits ^= 1u << 20;
    std::memcpy(&grad_[0], &bits, sizeof(bits));
  }
  // Test hooks: "train.grad_nan:flag" writes a NaN into this rank's own gradients (a device
  // fault); "train.diverge:flags" into every local compute's, replays too (the model's own).
  const bool diverge = !grad_.empty() && rtft::FaultFlag("train.diverge");
  if (!grad_.empty() && (diverge || (!ctx.replaying && rtft::FaultFlag("train.grad_nan"))))
    grad_[grad_.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  return Status::Ok();
}

// The gradients' collectives (StepFns::reduce) and the step's mean loss.
Status Trainer::Reduce(rtft::StepContext& ctx) {
  Status s;
  float loss = loss_;
  // --buffers: each rank's own running statistic, once per step whatever replays ran.
  for (size_t i = 0; i < running_.size(); ++i)
    running_[i] = 0.9f * running_[i] + 0.1f * float((ctx.step * 31 + ctx.rank * 7 + i) % 17);
  rtft::FaultPoint("train.backward");  // test hook: a failure in the middle of the computation
  rtft::Communicator* data = DataGroup(ctx);
  if (s.ok() && data) {
    s = data->ReduceScatterV(grad_.data(), grad_shard_.data(), Counts(data->world_size()),
                             DType::kFloat32, ReduceOp::kAvg);
  } else if (s.ok()) {
    grad_shard_.assign(grad_.begin(), grad_.end());
  }
  // The mean loss: the last stage's, over its tensor ranks (all equal) and data-parallel ranks.
  if (s.ok()) s = ctx.comm->AllReduce(&loss, &mean_loss_, 1, DType::kFloat32, ReduceOp::kSum);
  if (s.ok()) mean_loss_ /= block_ ? ctx.place.tensor * ctx.place.data : ctx.world_size;
  return Failed(ctx, s);
}

void Trainer::FlipBit() {
  uint32_t bits = 0;
  std::memcpy(&bits, Params(), 4);
  bits ^= 1u << 20;
  std::memcpy(Params(), &bits, 4);
}

rtft::Communicator* Trainer::DataGroup(rtft::StepContext& ctx) const {
  return block_ ? ctx.data : ctx.comm;
}

Status Trainer::Update(rtft::StepContext& ctx) {
  Status s;
  if (gpu_) {
    s = UpdateGpu(ctx);
  } else {
    float* mine = Params() + shard_.offset;
    if (optimizer_) {
      s = optimizer_->Step({grad_shard_.data()});
      if (!s.ok()) return s;
    } else {
      AdamW(mine, m_.data(), v_.data(), grad_shard_.data(), shard_.count, ctx.step);
    }
    rtft::Communicator* data = DataGroup(ctx);
    if (data) s = data->AllGatherV(mine, Params(), Counts(data->world_size()), DType::kFloat32);
    // Test hook: "train.flip:flag" flips a bit of this rank's copy of a replicated parameter
    // between two steps, as a bit flip in memory would (docs/protect.md, "Silent data
    // corruption"). A bit that "train.stuck_flip" flipped as the compute started is flipped again.
    if (s.ok() && stuck_step_ == ctx.step) FlipBit();
    stuck_step_.reset();
    if (s.ok() && rtft::FaultFlag("train.flip")) FlipBit();
  }
  if (!s.ok()) return Failed(ctx, s);
  if (o_.blocking_save_every > 0 && (ctx.step + 1) % o_.blocking_save_every == 0) {
    s = BlockingSave(*state_, gpu_.get(),
                     o_.ckpt_dir + "/blocking-rank-" + std::to_string(ctx.rank) + ".bin");
    if (!s.ok()) return Failed(ctx, s);
  }
  loss_ema_ = ctx.step == 0 ? mean_loss_ : 0.9 * loss_ema_ + 0.1 * mean_loss_;
  if (ctx.rank == 0 && (ctx.step % o_.log_every == 0 || ctx.step + 1 == o_.steps)) {
    char line[96];
    std::snprintf(line, sizeof(line), "step %" PRIu64 " loss %.5f ema %.5f", ctx.step, mean_loss_,
                  loss_ema_);
    Say(line);
  }
  return Status::Ok();
}

}  // namespace train
