// A small MLP for the data-parallel trainer: input -> hidden (tanh) -> hidden (tanh) -> classes
// (softmax cross-entropy), every parameter in one flat fp32 vector, on synthetic data that is a
// pure function of (seed, step, rank), so that a run can be repeated bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace train {

struct ModelShape {
  int inputs = 256;
  int hidden = 1024;
  int classes = 16;
  size_t params() const;
};

// Where each matrix (inputs x outputs, row major) and bias sits in the flat parameter vector.
struct ParamOffsets {
  size_t w1, b1, w2, b2, w3, b3, end;
};
ParamOffsets Offsets(const ModelShape& shape);

// Compiled for the GPU too (gpu_model.cu draws the initial parameters on the device), the same
// integer arithmetic and one exact float product: the same bits on both.
#if defined(__CUDACC__)
#define TRAIN_HOST_DEVICE __host__ __device__
#else
#define TRAIN_HOST_DEVICE
#endif

// SplitMix64: a fixed, portable sequence of pseudo-random numbers.
TRAIN_HOST_DEVICE inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), exactly representable.
TRAIN_HOST_DEVICE inline float Uniform(uint64_t key) {
  return static_cast<float>(static_cast<int64_t>(Mix(key) >> 40) - (1 << 23)) / (1 << 23);
}

// Each matrix's initial values are uniform in +-1/sqrt(its fan-in); the biases start at 0.
struct InitScales {
  float w1, w2, w3;
};
InitScales Scales(const ModelShape& shape);

// Parameter i's initial value.
TRAIN_HOST_DEVICE inline float InitialValue(const ParamOffsets& o, const InitScales& s,
                                            uint64_t seed, size_t i) {
  uint64_t tag;
  float scale;
  if (i < o.b1) {
    tag = 1, scale = s.w1;
  } else if (i >= o.w2 && i < o.b2) {
    tag = 2, scale = s.w2;
  } else if (i >= o.w3 && i < o.b3) {
    tag = 3, scale = s.w3;
  } else {
    return 0.0f;
  }
  return scale * Uniform((seed << 32) ^ (tag << 56) ^ i);
}

// Deterministic initial parameters: InitialValue of each.
void InitParams(const ModelShape& shape, uint64_t seed, float* params);

// One batch of `batch` samples for (step, rank): inputs in [-1, 1] and labels from a fixed
// random linear teacher, so the task can be learned.
void MakeBatch(const ModelShape& shape, uint64_t seed, uint64_t step, int rank, int batch,
               std::vector<float>* x, std::vector<int>* y);

// Forward and backward over the batch: the mean loss, and its gradient in `grad` (same layout
// as the parameters; overwritten).
float LossAndGradient(const ModelShape& shape, const float* params, const std::vector<float>& x,
                      const std::vector<int>& y, int batch, float* grad);

}  // namespace train
