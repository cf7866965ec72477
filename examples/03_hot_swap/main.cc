// 03_hot_swap: the smallest data-parallel trainer that survives a lost slot (docs/protect.md).
// A linear model fitted by SGD with momentum, ZeRO-1 style: each rank holds every weight and
// the momentum of its shard, reduce-scatters the gradients, updates its shard and all-gathers
// the weights. rt-ft takes a snapshot of the state every step, replicates the shard to the ring
// neighbour, and when a rank is lost feeds the spare that replaces it and resumes every rank at
// the same step: the run ends with the bits of a run without the failure (the digest it prints).
//
//   mpirun -np 4 --enable-recovery dp-launch --spares 1 -- example-03-hot-swap --steps 50
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <vector>

#include <xxhash.h>
#include <CLI/CLI.hpp>

#include "rtft/protect.h"

namespace {

constexpr int64_t kWeights = 4096;

// The gradient of (w . x - y)^2 / 2 for one sample that is a pure function of (step, rank).
void Gradient(const std::vector<float>& w, uint64_t step, int rank, std::vector<float>* g) {
  double dot = 0, y = 0;
  for (int64_t i = 0; i < kWeights; ++i) {
    const float x = std::sin(0.01f * i + 1.3f * step + 0.7f * rank);
    (*g)[i] = x;
    dot += w[i] * x;
    y += x * std::cos(0.1f * i);  // the weights to learn: cos(0.1 i)
  }
  for (float& gi : *g) gi *= static_cast<float>(dot - y);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"example-03-hot-swap: a data-parallel trainer that survives a lost slot"};
  uint64_t steps = 50;
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);

  std::vector<float> w(kWeights, 0.0f), grad(kWeights), momentum, grad_shard;
  auto rt = rtft::Runtime::Create().value();
  const int world = rt->info().world_size, rank = rt->info().rank;
  const rtft::EvenSplit mine = rtft::SplitEvenly(kWeights, world, rank);
  momentum.assign(mine.count, 0.0f);
  grad_shard.resize(mine.count);
  std::vector<size_t> counts;
  for (int r = 0; r < world; ++r) counts.push_back(rtft::SplitEvenly(kWeights, world, r).count);

  // The state: the weights (the same on every rank) and this rank's shard of the momentum.
  auto state = std::make_shared<rtft::CompositeProvider>();
  state->AddTensor({"weights", rtft::DType::kFloat32, {kWeights}, w.data()});
  rtft::TensorDesc shard =
      rtft::EvenShard("momentum", rtft::DType::kFloat32, {kWeights}, world, rank);
  shard.data = momentum.data();
  state->AddTensor(shard);
  auto protector = rtft::Protector::Create(rt.get()).value();
  if (rtft::Status s = protector->Protect(state); !s.ok())
    return std::puts(s.ToString().c_str()), 1;

  auto compute = [&](rtft::StepContext& c) {
    Gradient(w, c.step, c.rank, &grad);
    return c.comm->ReduceScatterV(grad.data(), grad_shard.data(), counts, rtft::DType::kFloat32,
                                  rtft::ReduceOp::kAvg);
  };
  auto update = [&](rtft::StepContext& c) {
    for (int64_t i = 0; i < mine.count; ++i) {
      momentum[i] = 0.9f * momentum[i] + grad_shard[i];
      w[mine.offset + i] -= 1e-4f * momentum[i];
    }
    return c.comm->AllGatherV(w.data() + mine.offset, w.data(), counts, rtft::DType::kFloat32);
  };
  auto result = protector->Run(steps, {compute, update});
  if (!result.ok()) return std::puts(result.status().ToString().c_str()), 1;
  if (result->outcome == rtft::RunOutcome::kShutdown) return 0;  // the job is ending

  // The weights and every rank's momentum, in rank order: the same on every rank and every run.
  uint64_t digests[2] = {XXH3_64bits(w.data(), w.size() * 4),
                         XXH3_64bits(momentum.data(), momentum.size() * 4)};
  std::vector<uint64_t> all(world);
  if (!protector->comm()->AllGather(&digests[1], all.data(), 1, rtft::DType::kInt64).ok()) return 1;
  digests[1] = XXH3_64bits(all.data(), all.size() * 8);
  std::printf("[hot_swap %d] done steps=%" PRIu64 " digest=%016" PRIx64 "\n", rank, steps,
              XXH3_64bits(digests, sizeof(digests)));
  return 0;
}
