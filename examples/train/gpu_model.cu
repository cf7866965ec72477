// nvcc warns that [[nodiscard]] on the StatusOr class template (status.h) is ignored; the host
// compiler enforces it everywhere else.
#pragma nv_diag_suppress 2810

#include "gpu_model.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

namespace train {
namespace {

using rtft::Status;

constexpr int kThreads = 256;
// cuBLAS's own recommendation for Hopper: a workspace of 32 MiB per handle and stream.
constexpr size_t kCublasWorkspace = size_t(32) << 20;

Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

Status Blas(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cublasGetStatusString(e));
}

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535 * 8 ? b : 65535 * 8));
}

__global__ void ToFloat(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __bfloat162float(in[i]);
}

__global__ void ToBf16(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __float2bfloat16_rn(in[i]);
}

// The initial parameters, as InitParams draws them on the host (model.h).
__global__ void InitParamsKernel(float* __restrict__ out, ParamOffsets o, InitScales s,
                                 uint64_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < o.end; i += stride)
    out[i] = InitialValue(o, s, seed, i);
}

// out[b][j] = tanh(out[b][j] + bias[j]) (tanh: only when `activate`).
__global__ void AddBias(float* __restrict__ out, const float* __restrict__ bias, int batch,
                        int n_out, bool activate) {
  const size_t n = size_t(batch) * n_out, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = __fadd_rn(out[i], bias[i % n_out]);
    out[i] = activate ? tanhf(v) : v;
  }
}

// d[i] *= 1 - h[i]^2: through the tanh.
__global__ void TanhBackward(float* __restrict__ d, const float* __restrict__ h, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    d[i] = __fmul_rn(d[i], __fsub_rn(1.0f, __fmul_rn(h[i], h[i])));
}

// gb[j] = sum over the batch of d[b][j], in batch order (no atomics).
__global__ void BiasGradient(const float* __restrict__ d, int batch, int n_out,
                             float* __restrict__ gb) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n_out) return;
  float acc = 0;
  for (int b = 0; b < batch; ++b) acc = __fadd_rn(acc, d[size_t(b) * n_out + j]);
  gb[j] = acc;
}

// One thread per sample: its cross-entropy in loss[b], the gradient of the batch's mean loss
// with respect to its logits in d.
__global__ void SoftmaxCrossEntropy(const float* __restrict__ logits, const int* __restrict__ y,
                                    int batch, int classes, float* __restrict__ d,
                                    float* __restrict__ loss) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const float* l = logits + size_t(b) * classes;
  float m = l[0];
  for (int c = 1; c < classes; ++c) m = fmaxf(m, l[c]);
  float sum = 0;
  for (int c = 0; c < classes; ++c) sum = __fadd_rn(sum, expf(__fsub_rn(l[c], m)));
  loss[b] = __fsub_rn(__fadd_rn(logf(sum), m), l[y[b]]);
  for (int c = 0; c < classes; ++c) {
    const float p = __fdiv_rn(expf(__fsub_rn(l[c], m)), sum);
    d[size_t(b) * classes + c] = __fdiv_rn(__fsub_rn(p, c == y[b] ? 1.0f : 0.0f), float(batch));
  }
}

// The model on the device (gpu_model.h).
class CudaModel final : public GpuModel {
 public:
  static rtft::StatusOr<std::unique_ptr<GpuModel>> Make(const ModelShape& shape, uint64_t seed,
                                                        int device, int batch);
  ~CudaModel() override;

  size_t params() const override { return n_; }
  void* params_data() const override { return params_; }
  float* grad_data() const override { return grad_; }
  void* stream() const override;
  int device() const override { return device_; }
  rtft::StatusOr<void*> Alloc(size_t bytes) override;
  rtft::StatusOr<void*> AllocHost(size_t bytes) override;
  rtft::StatusOr<float> LossAndGradient(const std::vector<float>& x,
                                        const std::vector<int>& y) override;
  rtft::Status Copy(void* dst, const void* src, size_t bytes) override;
  rtft::Status Sync() override;

 private:
  CudaModel() = default;
  struct Handles;
  ModelShape shape_;
  int device_ = 0;
  int batch_ = 0;
  size_t n_ = 0;
  void* params_ = nullptr;
  float* grad_ = nullptr;
  std::unique_ptr<Handles> h_;
};

struct CudaModel::Handles {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> device, host;
  float* work = nullptr;  // the fp32 copy of the parameters
  float *x = nullptr, *h1 = nullptr, *h2 = nullptr, *logits = nullptr;
  float *d1 = nullptr, *d2 = nullptr, *d3 = nullptr, *loss = nullptr;
  int* y = nullptr;
  std::vector<float> loss_host;
};

rtft::StatusOr<std::unique_ptr<GpuModel>> CudaModel::Make(const ModelShape& shape, uint64_t seed,
                                                          int device, int batch) {
  std::unique_ptr<CudaModel> g(new CudaModel());
  g->shape_ = shape;
  g->device_ = device;
  g->batch_ = batch;
  g->n_ = shape.params();
  g->h_ = std::make_unique<Handles>();
  Handles& h = *g->h_;
  RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "selecting the device"));
  RTFT_RETURN_IF_ERROR(
      Cuda(cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking), "creating the stream"));
  RTFT_RETURN_IF_ERROR(Blas(cublasCreate(&h.blas), "creating the cuBLAS handle"));
  RTFT_RETURN_IF_ERROR(Blas(cublasSetStream(h.blas, h.stream), "setting cuBLAS's stream"));
  RTFT_RETURN_IF_ERROR(Blas(cublasSetMathMode(h.blas, CUBLAS_DEFAULT_MATH), "cuBLAS math mode"));
  RTFT_RETURN_IF_ERROR(
      Blas(cublasSetAtomicsMode(h.blas, CUBLAS_ATOMICS_NOT_ALLOWED), "cuBLAS atomics mode"));
  auto alloc = [&](size_t bytes) -> rtft::StatusOr<void*> { return g->Alloc(bytes); };
  RTFT_ASSIGN_OR_RETURN(void* workspace, alloc(kCublasWorkspace));
  RTFT_RETURN_IF_ERROR(
      Blas(cublasSetWorkspace(h.blas, workspace, kCublasWorkspace), "cuBLAS's workspace"));
  const size_t n = g->n_, b = size_t(batch);
  RTFT_ASSIGN_OR_RETURN(g->params_, alloc(n * 2));
  RTFT_ASSIGN_OR_RETURN(void* grad, alloc(n * 4));
  RTFT_ASSIGN_OR_RETURN(void* work, alloc(n * 4));
  g->grad_ = static_cast<float*>(grad);
  h.work = static_cast<float*>(work);
  float** floats[] = {&h.x, &h.h1, &h.h2, &h.logits, &h.d1, &h.d2, &h.d3, &h.loss};
  const size_t counts[] = {b * shape.inputs, b * shape.hidden, b * shape.hidden,  b * shape.classes,
                           b * shape.hidden, b * shape.hidden, b * shape.classes, b};
  for (size_t i = 0; i < 8; ++i) {
    RTFT_ASSIGN_OR_RETURN(void* p, alloc(counts[i] * 4));
    *floats[i] = static_cast<float*>(p);
  }
  RTFT_ASSIGN_OR_RETURN(void* y, alloc(b * sizeof(int)));
  h.y = static_cast<int*>(y);
  // The initial parameters drawn on the device (InitParams' values: no 4 bytes per parameter to
  // draw on the host and copy at every start, a restarted process's included), rounded to bf16.
  const ParamOffsets offsets = Offsets(shape);
  InitParamsKernel<<<Blocks(n), kThreads, 0, h.stream>>>(h.work, offsets, Scales(shape), seed);
  RTFT_RETURN_IF_ERROR(Cuda(cudaGetLastError(), "drawing the parameters"));
  ToBf16<<<Blocks(n), kThreads, 0, h.stream>>>(h.work, static_cast<__nv_bfloat16*>(g->params_), n);
  RTFT_RETURN_IF_ERROR(Cuda(cudaGetLastError(), "rounding the parameters"));
  RTFT_RETURN_IF_ERROR(g->Sync());
  return rtft::StatusOr<std::unique_ptr<GpuModel>>(std::unique_ptr<GpuModel>(std::move(g)));
}

CudaModel::~CudaModel() {
  if (!h_) return;
  cudaSetDevice(device_);
  if (h_->stream) cudaStreamSynchronize(h_->stream);
  if (h_->blas) cublasDestroy(h_->blas);
  for (void* p : h_->device) cudaFree(p);
  for (void* p : h_->host) cudaFreeHost(p);
  if (h_->stream) cudaStreamDestroy(h_->stream);
}

void* CudaModel::stream() const { return h_->stream; }

rtft::StatusOr<void*> CudaModel::Alloc(size_t bytes) {
  void* p = nullptr;
  RTFT_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, bytes ? bytes : 1), "allocating device memory"));
  h_->device.push_back(p);
  RTFT_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(p, 0, bytes, h_->stream), "zeroing device memory"));
  RTFT_RETURN_IF_ERROR(Sync());
  return p;
}

rtft::StatusOr<void*> CudaModel::AllocHost(size_t bytes) {
  void* p = nullptr;
  RTFT_RETURN_IF_ERROR(
      Cuda(cudaMallocHost(&p, bytes ? bytes : 1), "allocating pinned host memory"));
  h_->host.push_back(p);
  std::memset(p, 0, bytes);
  return p;
}

Status CudaModel::Copy(void* dst, const void* src, size_t bytes) {
  RTFT_RETURN_IF_ERROR(
      Cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, h_->stream), "copying"));
  return Sync();
}

Status CudaModel::Sync() {
  return Cuda(cudaStreamSynchronize(h_->stream), "synchronizing the model's stream");
}

rtft::StatusOr<float> CudaModel::LossAndGradient(const std::vector<float>& x,
                                                 const std::vector<int>& y) {
  const ModelShape& s = shape_;
  const int batch = batch_;
  if (x.size() != size_t(batch) * s.inputs || y.size() != size_t(batch))
    return Status::InvalidArgument("a batch of " + std::to_string(y.size()) +
                                   " samples for a model made for " + std::to_string(batch));
  Handles& h = *h_;
  const ParamOffsets o = Offsets(s);
  cudaStream_t st = h.stream;
  RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
  RTFT_RETURN_IF_ERROR(
      Cuda(cudaMemcpyAsync(h.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, st), "the inputs"));
  RTFT_RETURN_IF_ERROR(
      Cuda(cudaMemcpyAsync(h.y, y.data(), y.size() * 4, cudaMemcpyHostToDevice, st), "the labels"));
  ToFloat<<<Blocks(n_), kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(params_), h.work, n_);
  const float* p = h.work;
  float* g = grad_;
  const float one = 1, zero = 0;
  // Row-major matrices are column-major transposes: out = in * w is out^T = w^T * in^T.
  auto dense = [&](const float* in, size_t w, size_t bias, int n_in, int n_out, float* out,
                   bool activate) -> Status {
    RTFT_RETURN_IF_ERROR(Blas(cublasSgemm(h.blas, CUBLAS_OP_N, CUBLAS_OP_N, n_out, batch, n_in,
                                          &one, p + w, n_out, in, n_in, &zero, out, n_out),
                              "the forward product"));
    AddBias<<<Blocks(size_t(batch) * n_out), kThreads, 0, st>>>(out, p + bias, batch, n_out,
                                                                activate);
    return Cuda(cudaGetLastError(), "the bias");
  };
  // dW = in^T d_out, db = the column sums of d_out, d_in = d_out w^T.
  auto backward = [&](const float* in, size_t w, size_t bias, const float* d_out, int n_in,
                      int n_out, float* d_in) -> Status {
    RTFT_RETURN_IF_ERROR(Blas(cublasSgemm(h.blas, CUBLAS_OP_N, CUBLAS_OP_T, n_out, n_in, batch,
                                          &one, d_out, n_out, in, n_in, &zero, g + w, n_out),
                              "the weights' gradient"));
    BiasGradient<<<Blocks(n_out), kThreads, 0, st>>>(d_out, batch, n_out, g + bias);
    RTFT_RETURN_IF_ERROR(Cuda(cudaGetLastError(), "the bias gradient"));
    if (d_in == nullptr) return Status::Ok();
    return Blas(cublasSgemm(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, n_in, batch, n_out, &one, p + w,
                            n_out, d_out, n_out, &zero, d_in, n_in),
                "the inputs' gradient");
  };
  RTFT_RETURN_IF_ERROR(dense(h.x, o.w1, o.b1, s.inputs, s.hidden, h.h1, true));
  RTFT_RETURN_IF_ERROR(dense(h.h1, o.w2, o.b2, s.hidden, s.hidden, h.h2, true));
  RTFT_RETURN_IF_ERROR(dense(h.h2, o.w3, o.b3, s.hidden, s.classes, h.logits, false));
  SoftmaxCrossEntropy<<<Blocks(batch), kThreads, 0, st>>>(h.logits, h.y, batch, s.classes, h.d3,
                                                          h.loss);
  RTFT_RETURN_IF_ERROR(Cuda(cudaGetLastError(), "the loss"));
  const size_t acts = size_t(batch) * s.hidden;
  RTFT_RETURN_IF_ERROR(backward(h.h2, o.w3, o.b3, h.d3, s.hidden, s.classes, h.d2));
  TanhBackward<<<Blocks(acts), kThreads, 0, st>>>(h.d2, h.h2, acts);
  RTFT_RETURN_IF_ERROR(backward(h.h1, o.w2, o.b2, h.d2, s.hidden, s.hidden, h.d1));
  TanhBackward<<<Blocks(acts), kThreads, 0, st>>>(h.d1, h.h1, acts);
  RTFT_RETURN_IF_ERROR(backward(h.x, o.w1, o.b1, h.d1, s.inputs, s.hidden, nullptr));
  h.loss_host.resize(batch);
  RTFT_RETURN_IF_ERROR(Copy(h.loss_host.data(), h.loss, size_t(batch) * 4));
  float loss = 0;
  for (float l : h.loss_host) loss += l;
  return loss / batch;
}

}  // namespace
}  // namespace train

extern "C" __attribute__((visibility("default"))) void rtft_train_make_gpu_model(
    const train::ModelShape* shape, uint64_t seed, int device, int batch,
    rtft::StatusOr<std::unique_ptr<train::GpuModel>>* out) {
  *out = train::CudaModel::Make(*shape, seed, device, batch);
}
