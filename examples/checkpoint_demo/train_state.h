// A training-like state for the checkpoint demo: per layer bf16 weights (what the forward pass
// uses), fp32 master weights and AdamW moments, plus step, RNG and LR schedule as objects.
// Gradients come from a seeded RNG, so a run is deterministic and two runs can be compared
// bit for bit.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rtft/state.h"

namespace demo {

struct Layer {
  std::vector<uint16_t> weights_bf16;
  std::vector<float> master, adam_m, adam_v;
};

class TrainState {
 public:
  TrainState(int layers, uint64_t params_per_layer, uint64_t seed);

  // One step: gradients from the RNG (the "forward/backward"), then the AdamW update.
  void ForwardBackward();
  void Update();
  uint64_t step() const { return step_; }
  // XXH-free digest (FNV-1a) of every byte of state, to compare two runs.
  uint64_t Digest() const;
  // Describes every tensor and object (for saving and for restoring into this state).
  const rtft::StateProvider& provider() const { return provider_; }
  uint64_t bytes() const;

 private:
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> grads_;
  uint64_t step_ = 0;
  std::mt19937_64 rng_;
  double lr_ = 1e-3;
  rtft::CompositeProvider provider_;
};

}  // namespace demo
