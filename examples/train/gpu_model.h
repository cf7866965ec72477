// The MLP of model.h on a CUDA device, for `rtft-train --device cuda`: its parameters in bf16 in
// device memory (the optimizer keeps the fp32 master weights), converted to an fp32 working copy
// for the step; the matrix products in cuBLAS (fp32, on the model's own stream with its own
// workspace, so that cuBLAS gives the same bits every run), the activations, the bias gradients
// and the softmax in kernels without atomics. Inputs are made on the host (model.h's MakeBatch)
// and copied in. No CUDA type in this header: a build without CUDA links gpu_model_none.cc,
// whose Create refuses.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model.h"
#include "rtft/status.h"

namespace train {

class GpuModel {
 public:
  // Parameters initialised as InitParams does (rounded to bf16), on `device`, for batches of
  // `batch` samples.
  static rtft::StatusOr<std::unique_ptr<GpuModel>> Create(const ModelShape& shape, uint64_t seed,
                                                          int device, int batch);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  size_t params() const { return n_; }
  void* params_data() const { return params_; }  // device, n bf16
  float* grad_data() const { return grad_; }     // device, n fp32
  void* stream() const;                          // the cudaStream_t everything runs on
  int device() const { return device_; }

  // Device memory of `bytes`, zeroed; pinned host memory of `bytes`, zeroed. Freed with the model.
  rtft::StatusOr<void*> Alloc(size_t bytes);
  rtft::StatusOr<void*> AllocHost(size_t bytes);
  // Forward and backward of the batch (host inputs): the gradients into grad_data(), the batch's
  // mean loss returned (the stream synchronized).
  rtft::StatusOr<float> LossAndGradient(const std::vector<float>& x, const std::vector<int>& y);
  // Copies on the stream (any direction), then a synchronization of the stream: an error of
  // either is returned.
  rtft::Status Copy(void* dst, const void* src, size_t bytes);
  rtft::Status Sync();

 private:
  GpuModel() = default;
  struct Handles;
  ModelShape shape_;
  int device_ = 0;
  int batch_ = 0;
  size_t n_ = 0;
  void* params_ = nullptr;
  float* grad_ = nullptr;
  std::unique_ptr<Handles> h_;
};

}  // namespace train
