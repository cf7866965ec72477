// The MLP of model.h on a CUDA device, for `rtft-train --device cuda`: its parameters in bf16 in
// device memory (the optimizer keeps the fp32 master weights), converted to an fp32 working copy
// for the step; the matrix products in cuBLAS (fp32, on the model's own stream with its own
// workspace, so that cuBLAS gives the same bits every run), the activations, the bias gradients
// and the softmax in kernels without atomics. Inputs are made on the host (model.h's MakeBatch)
// and copied in.
//
// The implementation (gpu_model.cu) is a module of its own, librtft-train-gpu.so, that Create
// loads on first use: a CPU run of rtft-train never loads cuBLAS, whose start-up alone (its
// libraries' constructors) took 0.4-0.55 s and 210 MB on the 2-core machine, in every process a
// crash restarts. No CUDA type in this header; where rt-ft is built without CUDA there is no
// module, and Create says so.
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
  virtual ~GpuModel() = default;

  virtual size_t params() const = 0;
  virtual void* params_data() const = 0;  // device, n bf16
  virtual float* grad_data() const = 0;   // device, n fp32
  virtual void* stream() const = 0;       // the cudaStream_t everything runs on
  virtual int device() const = 0;

  // Device memory of `bytes`, zeroed; pinned host memory of `bytes`, zeroed. Freed with the model.
  virtual rtft::StatusOr<void*> Alloc(size_t bytes) = 0;
  virtual rtft::StatusOr<void*> AllocHost(size_t bytes) = 0;
  // Forward and backward of the batch (host inputs): the gradients into grad_data(), the batch's
  // mean loss returned (the stream synchronized).
  virtual rtft::StatusOr<float> LossAndGradient(const std::vector<float>& x,
                                                const std::vector<int>& y) = 0;
  // Copies on the stream (any direction), then a synchronization of the stream: an error of
  // either is returned.
  virtual rtft::Status Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual rtft::Status Sync() = 0;
};

// The module's one entry point, looked up by name (gpu_model_load.cc).
using MakeGpuModelFn = void (*)(const ModelShape* shape, uint64_t seed, int device, int batch,
                                rtft::StatusOr<std::unique_ptr<GpuModel>>* out);
constexpr const char kMakeGpuModelSymbol[] = "rtft_train_make_gpu_model";
constexpr const char kGpuModelModule[] = "librtft-train-gpu.so";

}  // namespace train
