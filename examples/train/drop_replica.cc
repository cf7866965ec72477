// rtft-train --drop-replica D@STEP (a test option, docs/protect.md "3D layouts"): the reference
// of a shrink of a tensor x pipeline layout. After STEP steps, without any failure, the trainer
// lays itself out as if data-parallel replica D had left: that replica's ranks end, the others go
// on renumbered t + T * (d' + (D - 1) * p) with communicators of their own, each partition's
// parameters as they are and its optimizer state re-split evenly over D - 1 ranks (gathered
// whole first, independently of rt-ft's shrink, which it checks).
#include <cinttypes>
#include <cstdio>

#include "trainer.h"

namespace train {
namespace {

using rtft::DType;
using rtft::Status;

struct Comms {
  std::unique_ptr<rtft::Communicator> world, tensor, pipeline, data;
};

}  // namespace

Status Trainer::Group(const std::string& name, int rank, int size,
                      std::unique_ptr<rtft::Communicator>* c) const {
  if (size == 1) return Status::Ok();
  auto made = rt_->CreateGroupCommunicator("train.drop." + name, rank, size);
  if (!made.ok()) return made.status();
  *c = std::move(*made);
  return Status::Ok();
}

int Trainer::DropReplica(const rtft::StepFns& fns) {
  auto run = p_->Run(o_.drop_step, fns);
  if (!run.ok()) return Fail("training to the drop", run.status());
  if (run->outcome == rtft::RunOutcome::kShutdown) return 0;
  const rtft::RuntimeInfo now = rt_->current();
  auto at = rtft::PlaceInGrid({o_.tp, o_.pp, {}}, now.world_size, now.rank);
  if (!at.ok()) return Fail("--drop-replica", at.status());
  const int T = at->tensor, P = at->pipeline, D = at->data;
  if (o_.drop_replica >= D || D < 2)
    return Fail("--drop-replica",
                Status::InvalidArgument("no replica " + std::to_string(o_.drop_replica) +
                                        " to drop of " + std::to_string(D)));
  // The optimizer state of the partition, whole, on every rank of its data-parallel group.
  std::unique_ptr<rtft::Communicator> old_data;
  const std::string tp = ".t" + std::to_string(at->t) + ".p" + std::to_string(at->p);
  Status s = Group("old" + tp, at->d, D, &old_data);
  std::vector<float> m(n_), v(n_);
  if (s.ok()) s = old_data->AllGatherV(m_.data(), m.data(), Counts(D), DType::kFloat32);
  if (s.ok()) s = old_data->AllGatherV(v_.data(), v.data(), Counts(D), DType::kFloat32);
  if (!s.ok()) return Fail("gathering the optimizer state", s);
  if (at->d == o_.drop_replica) {
    Say("left the layout step=" + std::to_string(o_.drop_step));
    return 0;
  }
  const int d = at->d - (at->d > o_.drop_replica ? 1 : 0), world = T * P * (D - 1);
  const int rank = at->t + T * (d + (D - 1) * at->p);
  Comms c;
  const std::string ds = ".d" + std::to_string(d);
  s = Group("world", rank, world, &c.world);
  if (s.ok()) s = Group("tensor.p" + std::to_string(at->p) + ds, at->t, T, &c.tensor);
  if (s.ok()) s = Group("pipeline.t" + std::to_string(at->t) + ds, at->p, P, &c.pipeline);
  if (s.ok()) s = Group("data" + tp, d, D - 1, &c.data);
  if (!s.ok()) return Fail("the communicators without the replica", s);
  const std::vector<float> params(Params(), Params() + n_);
  auto state = Describe(world, rank);
  if (!state.ok()) return Fail("describing the state without the replica", state.status());
  std::copy(params.begin(), params.end(), Params());
  std::copy(m.begin() + shard_.offset, m.begin() + shard_.offset + shard_.count, m_.begin());
  std::copy(v.begin() + shard_.offset, v.begin() + shard_.offset + shard_.count, v_.begin());
  for (uint64_t step = o_.drop_step; step < o_.steps; ++step) {
    rtft::StepContext ctx;
    ctx.step = step;
    ctx.epoch = now.epoch;
    ctx.rank = rank;
    ctx.world_size = world;
    ctx.comm = c.world.get();
    ctx.place = {at->t, at->p, d, T, P, D - 1};
    ctx.tensor = c.tensor.get();
    ctx.pipeline = c.pipeline.get();
    ctx.data = c.data.get();
    s = Compute(ctx);
    if (s.ok()) s = Update(ctx);
    if (!s.ok()) return Fail("training without the replica", s);
  }
  uint64_t digest = 0;
  s = Digest(c.world.get(), &digest);
  if (!s.ok()) return Fail("gathering the digest", s);
  char line[160];
  std::snprintf(line, sizeof(line), "done steps=%" PRIu64 " loss_ema=%.6f digest=%016" PRIx64,
                o_.steps, loss_ema_, digest);
  Say(line);
  return 0;
}

}  // namespace train
