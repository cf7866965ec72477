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

// Deterministic initial parameters.
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
