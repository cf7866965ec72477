// The trainer's run (trainer.h): the job's driver, which makes the Protector and runs the steps
// through it, and the digest of the final state that every test and benchmark compares.
#include "trainer.h"

#include <sys/resource.h>
#include <sys/time.h>
#include <xxhash.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "blocking_save.h"
#include "rtft/testing.h"
#include "thread_cpu.h"

namespace train {

using rtft::DType;
using rtft::Status;

// XXH3 of every rank's tensors (each one hashed where it lives, in rank order: every partition
// and every shard) and of the loss average: the same on every rank, and for every run that
// computed the same bits.
Status Trainer::Digest(rtft::Communicator* c, uint64_t* digest) const {
  rtft::StateDescription d;
  RTFT_RETURN_IF_ERROR(state_->Describe(&d));
  std::vector<uint64_t> mine;
  std::vector<char> host;
  for (const rtft::TensorDesc& t : d.tensors) {
    const void* data = t.data;
    if (t.memory == rtft::MemoryKind::kDevice) {
      host.resize(t.bytes());
      RTFT_RETURN_IF_ERROR(gpu_->Copy(host.data(), t.data, t.bytes()));
      data = host.data();
    }
    mine.push_back(XXH3_64bits(data, t.bytes()));
  }
  std::vector<uint64_t> all(mine.size() * c->world_size());
  if (c->memory() == rtft::MemoryKind::kDevice) {
    // NCCL gathers device memory.
    RTFT_ASSIGN_OR_RETURN(void* send, gpu_->Alloc(mine.size() * 8));
    RTFT_ASSIGN_OR_RETURN(void* recv, gpu_->Alloc(all.size() * 8));
    RTFT_RETURN_IF_ERROR(gpu_->Copy(send, mine.data(), mine.size() * 8));
    rtft::CallOptions call;
    call.stream = gpu_->stream();
    RTFT_RETURN_IF_ERROR(c->AllGather(send, recv, mine.size(), DType::kInt64, call));
    RTFT_RETURN_IF_ERROR(c->Wait(call.stream));
    RTFT_RETURN_IF_ERROR(gpu_->Copy(all.data(), recv, all.size() * 8));
  } else {
    RTFT_RETURN_IF_ERROR(c->AllGather(mine.data(), all.data(), mine.size(), DType::kInt64));
  }
  all.push_back(XXH3_64bits(&loss_ema_, 8));
  *digest = XXH3_64bits(all.data(), all.size() * 8);
  return Status::Ok();
}

int Trainer::Run() {
  const rtft::RuntimeInfo me = rt_->current();
  rank_ = me.rank;
  // The process has its rank (a spare: once activated): where a replacement's start ends
  // (rtft-bench recovery's start_s).
  Say(std::string("up role=") + rtft::RuntimeRoleName(me.role) +
      " epoch=" + std::to_string(me.epoch));
  if (me.role == rtft::RuntimeRole::kInitial || me.role == rtft::RuntimeRole::kStandalone)
    ArmFaults(me.rank);
  if (o_.grid()) {
    const rtft::Status bad =
        o_.offload ? Status::InvalidArgument("--offload is not built for --tp/--pp")
        : o_.cuda  ? Status::InvalidArgument("--device cuda is not built for --tp/--pp")
        : (2 * o_.hidden) % o_.tp != 0
            ? Status::InvalidArgument("--tp must divide the blocks' inner width 2 x --hidden")
        : o_.batch % o_.micro != 0 ? Status::InvalidArgument("--micro-batches must divide --batch")
                                   : Status::Ok();
    if (!bad.ok()) return Fail("the layout", bad);
  } else if (o_.drop_replica >= 0) {
    return Fail("the layout", Status::InvalidArgument("--drop-replica needs --tp or --pp"));
  } else if (o_.cuda) {
    const double began = WallSeconds();
    const Status made = CreateGpu(me.device);
    if (!made.ok()) return Fail("making the model on the GPU", made);
    if (me.role == rtft::RuntimeRole::kSpareActivated || me.role == rtft::RuntimeRole::kRestarted)
      cuda_init_s_ = WallSeconds() - began;
  } else {
    n_ = shape_.params();
    params_.resize(n_);
    grad_.resize(n_);
    InitParams(shape_, o_.seed, params_.data());
  }

  rtft::ProtectOptions po;
  po.enabled = o_.protect;
  if (gpu_) {
    po.backend = o_.comm == "nccl" ? rtft::CommBackend::kNccl : rtft::CommBackend::kGloo;
    po.device = gpu_->device();
    po.stream = gpu_->stream();
  }
  po.grid = {o_.tp, o_.pp, {}};
  po.l3_every = o_.l3_every;
  po.ckpt_dir = o_.ckpt_dir;
  if (o_.protect_blocks > 0)
    po.protect_step = [b = o_.protect_blocks](uint64_t step) { return (step / b) % 2 == 0; };
  if (o_.protect_every > 0)
    po.protect_step = [n = o_.protect_every](uint64_t step) { return step % n == 0; };
  auto p = rtft::Protector::Create(rt_, po);
  if (!p.ok()) return Fail("creating the protector", p.status());
  p_ = std::move(*p);
  auto state = Describe(me.world_size, me.rank);
  Status s = state.status();
  // --on-spares-exhausted shrink: the survivors go on with fewer ranks, each with a new shard of
  // the optimizer state (rt-ft fills it).
  if (s.ok())
    s = p_->Protect(*state, [this](const rtft::ShrinkPlace& place) {
      return Describe(place.world_size, place.rank);
    });
  if (!s.ok()) return Fail("declaring the state", s);
  // Failure events as they arrive, for the timeline (the Protector acts on them itself).
  listener_ = rt_->Subscribe([this](const rtft::FailureEvent& e) {
    char text[160];
    std::snprintf(text, sizeof(text), "event epoch=%" PRIu64 " failed=%zu shutdown=%d", e.epoch,
                  e.failed_ranks.size(), e.shutdown ? 1 : 0);
    Say(text);
  });
  rtft::StepFns fns{[this](rtft::StepContext& c) { return Compute(c); },
                    [this](rtft::StepContext& c) { return Update(c); }};
  // The CPU path splits its compute, for the replay of steps by a peer (RTFT_PROTECT_REPLAY_EVERY;
  // the same bits either way).
  if (!gpu_) {
    fns.local = [this](rtft::StepContext& c) { return Local(c); };
    fns.reduce = [this](rtft::StepContext& c) { return Reduce(c); };
  }
  if (o_.drop_replica >= 0) return DropReplica(fns);
  auto run = p_->Run(o_.steps, fns);
  if (!run.ok()) return Fail("training", run.status());
  if (run->outcome == rtft::RunOutcome::kShutdown) {
    Say(run->checkpointed ? "shutdown (checkpoint written)" : "shutdown");
    return 0;
  }
  uint64_t digest = 0;
  s = Digest(p_->comm(), &digest);
  if (!s.ok()) return Fail("gathering the digest", s);
  std::string times = "step_s=" + timing_[1].Mean(timing_[1].wall_s) +
                      " cpu_step_s=" + timing_[1].Mean(timing_[1].cpu_s);
  if (o_.protect_blocks > 0)
    times += " paused_step_s=" + timing_[0].Mean(timing_[0].wall_s) +
             " paused_cpu_step_s=" + timing_[0].Mean(timing_[0].cpu_s);
  const rtft::ProtectStats& ps = p_->stats();
  const double per = ps.protected_steps ? 1.0 / ps.protected_steps : 0.0;
  char waits[224];
  std::snprintf(waits, sizeof(waits),
                " fence_wait_s=%.6f replica_wait_s=%.6f state_bytes=%" PRIu64 " l2_bytes=%" PRIu64
                " l2_s=%.6f",
                ps.fence_wait_s * per, ps.replica_wait_s * per, ps.state_bytes, ps.replica_bytes,
                ps.replica_s);
  times += waits;
  // The protection's host memory traffic and the CPU time of each thread (docs/benchmarks.md,
  // "A node's budget").
  std::snprintf(waits, sizeof(waits),
                " protected_steps=%" PRIu64 " l1_copied_bytes=%" PRIu64 " l1_hashed_bytes=%" PRIu64,
                ps.protected_steps, ps.l1_copied_bytes, ps.l1_hashed_bytes);
  times += waits;
  times += " threads_cpu_s=" + FormatThreadCpu(ThreadCpuSeconds());
  char line[256];
  std::snprintf(line, sizeof(line), "done steps=%" PRIu64 " loss_ema=%.6f digest=%016" PRIx64 " ",
                o_.steps, loss_ema_, digest);
  Say(line + times);
  return 0;
}

}  // namespace train
