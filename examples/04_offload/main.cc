// 04_offload: an OffloadOptimizer's state protected per step (docs/protect.md, include/rtft/
// offload.h). Each rank's AdamW updates its ZeRO-1 shard of the weights with rt-ft's vectorized
// CPU kernel; its master weights and moments are protected through the optimizer's own state
// provider, the one the checkpoint engine saves, so nothing is described twice. A lost slot's
// spare receives its rank's master weights and moments from the ring neighbour, and the
// provider's Restored() writes them back into the weights: the run ends with the bits of a run
// without the failure.
//
//   mpirun -np 4 --enable-recovery dp-launch --spares 1 -- example-04-offload --steps 40
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <vector>

#include <xxhash.h>
#include <CLI/CLI.hpp>

#include "rtft/offload.h"
#include "rtft/protect.h"

namespace {

constexpr int64_t kWeights = 8192;

void Gradient(const std::vector<float>& w, uint64_t step, int rank, std::vector<float>* g) {
  double dot = 0, y = 0;
  for (int64_t i = 0; i < kWeights; ++i) {
    const float x = std::sin(0.01f * i + 1.3f * step + 0.7f * rank);
    (*g)[i] = x;
    dot += w[i] * x;
    y += x * std::cos(0.1f * i);
  }
  for (float& gi : *g) gi *= static_cast<float>(dot - y);
}

// XXH3 of the replicated tensors and of every rank's shards, in rank order.
uint64_t Digest(const rtft::StateProvider& state, rtft::Communicator* comm) {
  rtft::StateDescription d;
  if (!state.Describe(&d).ok()) return 0;
  std::vector<uint64_t> mine, own;
  for (const rtft::TensorDesc& t : d.tensors)
    (t.shard.sharded() ? mine : own).push_back(XXH3_64bits(t.data, t.bytes()));
  std::vector<uint64_t> all(mine.size() * comm->world_size());
  if (!comm->AllGather(mine.data(), all.data(), mine.size(), rtft::DType::kInt64).ok()) return 0;
  all.insert(all.end(), own.begin(), own.end());
  return XXH3_64bits(all.data(), all.size() * 8);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"example-04-offload: an offloaded optimizer's state protected per step"};
  uint64_t steps = 40;
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);

  std::vector<float> w(kWeights, 0.0f), grad(kWeights), grad_shard;
  auto rt = rtft::Runtime::Create().value();
  const int world = rt->info().world_size, rank = rt->info().rank;
  const rtft::EvenSplit mine = rtft::SplitEvenly(kWeights, world, rank);
  grad_shard.resize(mine.count);
  std::vector<size_t> counts;
  for (int r = 0; r < world; ++r) counts.push_back(rtft::SplitEvenly(kWeights, world, r).count);

  // The optimizer of this rank's shard; its state carries the shard's place in the weights.
  rtft::OffloadParam param;
  param.name = "weights";
  param.data = w.data() + mine.offset;
  param.elements = mine.count;
  param.shard = rtft::EvenShard("weights", rtft::DType::kFloat32, {kWeights}, world, rank).shard;
  rtft::OffloadOptions options;
  options.mode = rtft::OffloadMode::kCpu;
  auto optimizer = rtft::OffloadOptimizer::Create({param}, options).value();

  auto state = std::make_shared<rtft::CompositeProvider>();
  state->AddTensor({"weights", rtft::DType::kFloat32, {kWeights}, w.data()});
  state->Add(optimizer->state_provider());
  auto protector = rtft::Protector::Create(rt.get()).value();
  if (rtft::Status s = protector->Protect(state); !s.ok())
    return std::puts(s.ToString().c_str()), 1;

  auto compute = [&](rtft::StepContext& c) {
    Gradient(w, c.step, c.rank, &grad);
    return c.comm->ReduceScatterV(grad.data(), grad_shard.data(), counts, rtft::DType::kFloat32,
                                  rtft::ReduceOp::kAvg);
  };
  auto update = [&](rtft::StepContext& c) {
    rtft::Status s = optimizer->Step({grad_shard.data()});  // the shard of `w`, in place
    if (!s.ok()) return s;
    return c.comm->AllGatherV(w.data() + mine.offset, w.data(), counts, rtft::DType::kFloat32);
  };
  auto result = protector->Run(steps, {compute, update});
  if (!result.ok()) return std::puts(result.status().ToString().c_str()), 1;
  if (result->outcome == rtft::RunOutcome::kShutdown) return 0;
  std::printf("[offload %d] done steps=%" PRIu64 " optimizer_steps=%" PRId64 " digest=%016" PRIx64
              "\n",
              rank, steps, optimizer->step_count(), Digest(*state, protector->comm()));
  return 0;
}
