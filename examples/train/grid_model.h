// The model of `rtft-train --tp T --pp P`: P pipeline stages, each one residual MLP block
// out = x + tanh(x W1 + b1) W2 of width H and inner width F = 2H, its matrices split over the T
// ranks of a tensor group (W1 by columns, W2 by rows: Megatron-LM's column- then row-parallel,
// the partial products summed in the tensor group); a mean-squared error against a target that
// is a pure function of the input. A step runs a fixed GPipe schedule of micro-batches: every
// micro-batch forward through the stages in order, then backward in reverse. Inputs are a pure
// function of (seed, step, data-parallel rank), parameters of (seed, stage, tensor rank).
#pragma once

#include <cstdint>
#include <vector>

#include "rtft/comm.h"
#include "rtft/protect.h"

namespace train {

struct GridShape {
  int hidden = 64;  // H; F = 2H must split over the T tensor ranks
  int batch = 8;    // samples per data-parallel rank and step
  int micro = 2;    // micro-batches per step (divides the batch)
  int inner() const { return 2 * hidden; }
};

// One rank's block: its columns of W1 and b1 and its rows of W2, in one flat vector (what the
// rank protects and its data-parallel group averages gradients of).
class GridBlock {
 public:
  GridBlock(const GridShape& shape, const rtft::GridPlace& at, uint64_t seed);
  size_t params() const { return w1_ + b1_ + w2_; }
  float* data() { return p_.data(); }
  const float* data() const { return p_.data(); }

  // Forward, backward and the collectives of one step on the tensor and pipeline groups:
  // gradients (summed over micro-batches) into `grad` (params() floats), the step's mean loss
  // into `loss` on the last stage (0 elsewhere).
  rtft::Status Step(rtft::StepContext& c, uint64_t seed, std::vector<float>* grad, float* loss);

 private:
  struct Saved {
    std::vector<float> x, h;  // a micro-batch's input and activation, for its backward
  };
  rtft::Status Forward(rtft::StepContext& c, const std::vector<float>& x, Saved* s,
                       std::vector<float>* out);
  rtft::Status Backward(rtft::StepContext& c, const Saved& s, const std::vector<float>& dout,
                        std::vector<float>* grad, std::vector<float>* dx);

  GridShape shape_;
  int f_;  // this rank's inner columns: F / T
  size_t w1_, b1_, w2_;
  std::vector<float> p_;
};

}  // namespace train
