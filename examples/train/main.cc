// rtft-train: a data-parallel trainer protected by rt-ft. An MLP on synthetic data (a pure
// function of seed, step and rank), ZeRO-1 AdamW: gradients reduce-scattered, each rank updates
// its shard of the parameters with its shard of the optimizer state, parameters all-gathered.
// Every step is bracketed by rtft::Protector, so a rank lost under dp-launch is replaced by a
// spare fed from its neighbours' snapshots and the run ends with the same bits as a run without
// failures: it prints a digest of the final parameters and optimizer state to compare.
//
//   mpirun -np 5 --enable-recovery dp-launch --spares 1 -- rtft-train --steps 60
#include <sys/resource.h>
#include <sys/time.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <xxhash.h>
#include <CLI/CLI.hpp>

#include "model.h"
#include "rtft/protect.h"
#include "rtft/runtime.h"
#include "rtft/testing.h"

namespace {

using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;

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

struct Options {
  uint64_t steps = 60;
  int64_t l3_every = -1;
  std::string ckpt_dir;
  int hidden = 1024;
  int batch = 16;
  uint64_t seed = 42;
  int log_every = 10;
  std::string fault;  // RANK:point[@n][:action],... (tests and the demo)
  bool protect = true;
  // rtft-bench protect: blocks of this many steps alternately protected and paused (0: all
  // protected), each kind timed on its own.
  uint64_t protect_blocks = 0;
};

// ZeRO-1 partition of n parameters: rank r owns [start, start + count).
struct Shard {
  std::vector<size_t> counts;
  size_t start = 0, count = 0;
};

Shard Partition(size_t n, int world, int rank) {
  Shard s;
  s.counts.resize(world);
  for (int r = 0; r < world; ++r) s.counts[r] = n / world + (size_t(r) < n % world ? 1 : 0);
  for (int r = 0; r < rank; ++r) s.start += s.counts[r];
  s.count = s.counts[rank];
  return s;
}

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

// Sums of the step times of one kind of step.
struct Timing {
  double wall_s = 0, cpu_s = 0;
  uint64_t steps = 0;
  void Add(double wall, double cpu) {
    wall_s += wall;
    cpu_s += cpu;
    ++steps;
  }
  std::string Wall() const { return Mean(wall_s); }
  std::string Cpu() const { return Mean(cpu_s); }
  std::string Mean(double sum) const {
    char text[32];
    std::snprintf(text, sizeof(text), "%.6f", steps ? sum / steps : 0.0);
    return text;
  }
};

class Trainer {
 public:
  Trainer(const Options& o, rtft::Runtime* rt) : o_(o), rt_(rt) { shape_.hidden = o.hidden; }
  ~Trainer() {
    if (listener_ != 0) rt_->Unsubscribe(listener_);
  }

  int Run();

 private:
  Status Step(uint64_t step);
  void Say(const std::string& line) {
    std::printf("[train %d] %s t=%.3f\n", rank_, line.c_str(), WallSeconds());
    std::fflush(stdout);
  }
  int Fail(const char* what, const Status& s) {
    std::fprintf(stderr, "[train %d] %s: %s\n", rank_, what, s.ToString().c_str());
    return 1;
  }
  void Report(const rtft::RecoveryInfo& r, double took) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "recovered epoch=%" PRIu64 " step=%" PRIu64
                  " world=%d source=%s fed=%d bytes=%" PRIu64
                  " event_s=%.3f agree_s=%.3f rebuild_s=%.3f transfer_s=%.3f took_s=%.3f",
                  r.epoch, r.step, r.world_size, r.source.c_str(), r.ranks_fed, r.bytes_moved,
                  r.wait_event_s, r.agree_s, r.rebuild_s, r.transfer_s, took);
    Say(line);
  }

  Options o_;
  rtft::Runtime* rt_;
  std::unique_ptr<rtft::Protector> p_;
  train::ModelShape shape_;
  int rank_ = 0, world_ = 1;
  Shard shard_;
  std::vector<float> params_, m_, v_, grad_, grad_shard_;
  double loss_ema_ = 0;
  uint64_t listener_ = 0;
  std::vector<float> x_;
  std::vector<int> y_;
};

Status Trainer::Step(uint64_t step) {
  RTFT_RETURN_IF_ERROR(p_->BeginStep(step));
  train::MakeBatch(shape_, o_.seed, step, rank_, o_.batch, &x_, &y_);
  float loss = train::LossAndGradient(shape_, params_.data(), x_, y_, o_.batch, grad_.data());
  rtft::FaultPoint("train.backward");  // test hook: a failure in the middle of the computation
  rtft::Communicator* c = p_->comm();
  RTFT_RETURN_IF_ERROR(c->ReduceScatterV(grad_.data(), grad_shard_.data(), shard_.counts,
                                         DType::kFloat32, ReduceOp::kAvg));
  float mean = 0;
  RTFT_RETURN_IF_ERROR(c->AllReduce(&loss, &mean, 1, DType::kFloat32, ReduceOp::kAvg));
  RTFT_RETURN_IF_ERROR(p_->BeforeUpdate());  // the state changes from here on
  AdamW(params_.data() + shard_.start, m_.data(), v_.data(), grad_shard_.data(), shard_.count,
        step);
  RTFT_RETURN_IF_ERROR(
      c->AllGatherV(params_.data() + shard_.start, params_.data(), shard_.counts, DType::kFloat32));
  loss_ema_ = step == 0 ? mean : 0.9 * loss_ema_ + 0.1 * mean;
  if (rank_ == 0 && (step % o_.log_every == 0 || step + 1 == o_.steps)) {
    char line[96];
    std::snprintf(line, sizeof(line), "step %" PRIu64 " loss %.5f ema %.5f", step, mean, loss_ema_);
    Say(line);
  }
  return p_->EndStep();
}

int Trainer::Run() {
  const rtft::RuntimeInfo me = rt_->current();
  rank_ = me.rank;
  world_ = me.world_size;
  // Test hook: arm this rank's named fault points (docs/testing.md). A process restarted or
  // activated later does not arm them again.
  if (me.role == rtft::RuntimeRole::kInitial || me.role == rtft::RuntimeRole::kStandalone) {
    std::string mine;
    size_t at = 0;
    while (at < o_.fault.size()) {
      const size_t end = std::min(o_.fault.find(',', at), o_.fault.size());
      const std::string item = o_.fault.substr(at, end - at);
      at = end + 1;
      const size_t colon = item.find(':');
      if (colon == std::string::npos || std::atoi(item.c_str()) != me.rank) continue;
      mine += (mine.empty() ? "" : ",") + item.substr(colon + 1);
    }
    if (!mine.empty()) rtft::ArmFaults(mine.c_str());
  }
  const size_t n = shape_.params();
  params_.resize(n);
  grad_.resize(n);
  train::InitParams(shape_, o_.seed, params_.data());
  shard_ = Partition(n, world_, rank_);
  m_.assign(shard_.count, 0.0f);
  v_.assign(shard_.count, 0.0f);
  grad_shard_.assign(shard_.count, 0.0f);

  rtft::ProtectOptions po;
  po.enabled = o_.protect;
  po.l3_every = o_.l3_every;
  po.ckpt_dir = o_.ckpt_dir;
  auto p = rtft::Protector::Create(rt_, po);
  if (!p.ok()) return Fail("creating the protector", p.status());
  p_ = std::move(*p);
  Status s = p_->AddReplicated({"params", DType::kFloat32, {int64_t(n)}, params_.data()});
  if (s.ok()) s = p_->AddSharded({"adam_m", DType::kFloat32, {int64_t(shard_.count)}, m_.data()});
  if (s.ok()) s = p_->AddSharded({"adam_v", DType::kFloat32, {int64_t(shard_.count)}, v_.data()});
  if (s.ok())
    s = p_->AddObject({"loss_ema",
                       [this] {
                         return rtft::StatusOr<std::string>(
                             std::string(reinterpret_cast<const char*>(&loss_ema_), 8));
                       },
                       [this](const std::string& b) {
                         if (b.size() != 8) return Status::DataLoss("loss_ema: 8 bytes expected");
                         std::memcpy(&loss_ema_, b.data(), 8);
                         return Status::Ok();
                       }});
  // --on-spares-exhausted shrink: the survivors go on with fewer ranks, each with a new shard of
  // the optimizer state (rt-ft fills it).
  if (s.ok())
    s = p_->OnShrink([this, n](int world, int rank) {
      rank_ = rank;
      world_ = world;
      shard_ = Partition(n, world_, rank_);
      m_.assign(shard_.count, 0.0f);
      v_.assign(shard_.count, 0.0f);
      grad_shard_.assign(shard_.count, 0.0f);
      return rtft::StatusOr<std::vector<rtft::TensorDesc>>(std::vector<rtft::TensorDesc>{
          {"adam_m", DType::kFloat32, {int64_t(shard_.count)}, m_.data()},
          {"adam_v", DType::kFloat32, {int64_t(shard_.count)}, v_.data()}});
    });
  if (!s.ok()) return Fail("declaring the state", s);
  // Failure events as they arrive, for the timeline (the Protector acts on them itself).
  listener_ = rt_->Subscribe([this](const rtft::FailureEvent& e) {
    char text[160];
    std::snprintf(text, sizeof(text), "event epoch=%" PRIu64 " failed=%zu shutdown=%d", e.epoch,
                  e.failed_ranks.size(), e.shutdown ? 1 : 0);
    Say(text);
  });
  const double t0 = WallSeconds();
  auto start = p_->Start();
  if (!start.ok()) return Fail("starting protection", start.status());
  char line[256];
  std::snprintf(line, sizeof(line),
                "start role=%s rank=%d world=%d epoch=%" PRIu64 " step=%" PRIu64 " params=%zu",
                rtft::RuntimeRoleName(me.role), rank_, world_, rt_->current().epoch, *start, n);
  Say(line);
  if (me.role != rtft::RuntimeRole::kInitial && me.role != rtft::RuntimeRole::kStandalone)
    Report(p_->last_recovery(), WallSeconds() - t0);
  uint64_t step = *start;
  // Mean step time and CPU time per step after the first three steps (warm-up), for rtft-bench
  // protect; with --protect-blocks, of the protected [1] and the paused [0] steps apart, leaving
  // out the first step of each block (it waits for the last protected step's replica, or does
  // not).
  Timing timing[2];
  while (step < o_.steps) {
    const bool paused = o_.protect_blocks > 0 && (step / o_.protect_blocks) % 2 == 1;
    p_->Pause(paused);
    const double begin = WallSeconds(), cpu_begin = CpuSeconds();
    s = Step(step);
    if (s.ok()) {
      if (step >= *start + 3 && (o_.protect_blocks == 0 || step % o_.protect_blocks != 0))
        timing[!paused].Add(WallSeconds() - begin, CpuSeconds() - cpu_begin);
      ++step;
      continue;
    }
    if (s.code() != rtft::StatusCode::kAborted) return Fail("training", s);
    std::snprintf(line, sizeof(line), "failure step=%" PRIu64 " after=%.3f what=%s", step,
                  WallSeconds() - begin, s.message().c_str());
    Say(line);
    const double r0 = WallSeconds();
    auto resumed = p_->Recover();
    if (!resumed.ok()) {
      if (resumed.status().message().find("shutting down") != std::string::npos) {
        Say("shutdown");
        return 0;
      }
      return Fail("recovering", resumed.status());
    }
    Report(p_->last_recovery(), WallSeconds() - r0);
    step = *resumed;
  }
  // XXH3 of the parameters, of every rank's optimizer shard (in rank order) and of the loss
  // average: the same on every rank, and for every run that computed the same bits.
  std::vector<uint64_t> mine = {XXH3_64bits(m_.data(), m_.size() * 4),
                                XXH3_64bits(v_.data(), v_.size() * 4)};
  std::vector<uint64_t> all(2 * world_);
  s = p_->comm()->AllGather(mine.data(), all.data(), 2, DType::kInt64);
  if (!s.ok()) return Fail("gathering the digest", s);
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  XXH3_64bits_update(h, params_.data(), params_.size() * 4);
  XXH3_64bits_update(h, all.data(), all.size() * 8);
  XXH3_64bits_update(h, &loss_ema_, 8);
  const uint64_t digest = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  std::string times = "step_s=" + timing[1].Wall() + " cpu_step_s=" + timing[1].Cpu();
  if (o_.protect_blocks > 0)
    times += " paused_step_s=" + timing[0].Wall() + " paused_cpu_step_s=" + timing[0].Cpu();
  std::snprintf(line, sizeof(line), "done steps=%" PRIu64 " loss_ema=%.6f digest=%016" PRIx64 " %s",
                o_.steps, loss_ema_, digest, times.c_str());
  Say(line);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rtft-train: a data-parallel MLP trainer protected by rt-ft (ZeRO-1 AdamW)"};
  Options o;
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 100000000));
  app.add_option("--l3-every", o.l3_every, "persistent checkpoint every N steps (-1: none)");
  app.add_option("--ckpt-dir", o.ckpt_dir, "directory of the persistent checkpoints");
  app.add_option("--hidden", o.hidden, "hidden width (the model has about hidden^2 parameters)")
      ->check(CLI::Range(8, 16384));
  app.add_option("--batch", o.batch, "samples per rank and step")->check(CLI::Range(1, 65536));
  app.add_option("--seed", o.seed, "seed of the data and the initial parameters");
  app.add_option("--log-every", o.log_every, "print the loss every N steps")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--fault", o.fault,
                 "test hook: named fault points per rank, RANK:point[@n][:action],... "
                 "(docs/testing.md)");
  app.add_flag("!--no-protect", o.protect,
               "run without per-step snapshots and replicas (to measure what they cost)");
  app.add_option("--protect-blocks", o.protect_blocks,
                 "blocks of N steps alternately protected and paused, each kind timed apart "
                 "(rtft-bench protect; a failure in a paused block rolls back further)")
      ->check(CLI::Range(0, 1000000));
  CLI11_PARSE(app, argc, argv);
  auto rt = rtft::Runtime::Create();
  if (!rt.ok()) {
    std::fprintf(stderr, "rtft-train: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  return Trainer(o, rt->get()).Run();
}
