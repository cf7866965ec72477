// rtft-health's device check, over the CUDA runtime and cuBLAS (built with RTFT_WITH_CUDA).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "tools/rtft_health/checks.h"

namespace rtft::health {
namespace {

// An exact product: entries in [-3, 3], so every sum of n products stays far below 2^24.
float A(int i, int j) { return static_cast<float>((i * 7 + j * 3) % 7 - 3); }
float B(int i, int j) { return static_cast<float>((i * 5 + j * 11) % 7 - 3); }

}  // namespace

GpuResult CheckGpu(int device, int n, uint64_t copy_bytes) {
  GpuResult r;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    r.skipped = "no CUDA device";
    (void)cudaGetLastError();
    return r;
  }
  if (device < 0 || device >= count) {
    r.error = "device " + std::to_string(device) + " is not one of the " + std::to_string(count) +
              " CUDA devices";
    return r;
  }
  auto fail = [&](const char* what, cudaError_t e) {
    r.error = std::string(what) + ": " + cudaGetErrorString(e);
    return r;
  };
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return fail("cudaSetDevice", e);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) r.name = prop.name;
  // Column-major, as cuBLAS reads them.
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      a[size_t(j) * n + i] = A(i, j);
      b[size_t(j) * n + i] = B(i, j);
    }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  void* host = nullptr;
  void* dev_copy = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  auto cleanup = [&] {
    if (blas) cublasDestroy(blas);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    cudaFree(dev_copy);
    cudaFreeHost(host);
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
  };
  const size_t bytes = size_t(n) * n * sizeof(float);
  cudaError_t e = cudaMalloc(&da, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&db, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dc, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dev_copy, copy_bytes);
  if (e == cudaSuccess) e = cudaMallocHost(&host, copy_bytes);
  if (e == cudaSuccess) e = cudaEventCreate(&t0);
  if (e == cudaSuccess) e = cudaEventCreate(&t1);
  if (e == cudaSuccess) e = cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemset(dev_copy, 0x5a, copy_bytes);
  if (e != cudaSuccess) {
    cleanup();
    return fail("allocating and filling the check's buffers", e);
  }
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    cleanup();
    r.error = "cublasCreate failed";
    return r;
  }
  // Exact float arithmetic, not TF32: the check compares every element.
  (void)cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH);
  const float one = 1, zero = 0;
  const int reps = 5;
  bool ok = cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc,
                        n) == CUBLAS_STATUS_SUCCESS;  // warm-up
  ok = ok && cudaEventRecord(t0) == cudaSuccess;
  for (int i = 0; ok && i < reps; ++i)
    ok = cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n) ==
         CUBLAS_STATUS_SUCCESS;
  ok = ok && cudaEventRecord(t1) == cudaSuccess && cudaEventSynchronize(t1) == cudaSuccess;
  float ms = 0;
  if (ok) ok = cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess;
  if (ok) ok = cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  if (!ok) {
    const cudaError_t last = cudaGetLastError();
    cleanup();
    return fail("the GEMM", last);
  }
  r.gemm_tflops = ms > 0 ? 2.0 * n * n * double(n) * reps / (ms / 1e3) / 1e12 : 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int k = 0; k < n; ++k) want += A(i, k) * B(k, j);
      if (c[size_t(j) * n + i] != want) ++r.gemm_wrong;
    }
  r.gemm_exact = r.gemm_wrong == 0;
  // The device-to-host copy, three times, the best kept.
  double best = 0;
  for (int i = 0; i < 3 && e == cudaSuccess; ++i) {
    e = cudaEventRecord(t0);
    if (e == cudaSuccess) e = cudaMemcpyAsync(host, dev_copy, copy_bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaEventRecord(t1);
    if (e == cudaSuccess) e = cudaEventSynchronize(t1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t0, t1);
    if (e == cudaSuccess && ms > 0) best = std::max(best, copy_bytes / (ms / 1e3) / 1e9);
  }
  if (e != cudaSuccess) {
    cleanup();
    return fail("the device-to-host copy", e);
  }
  if (static_cast<const unsigned char*>(host)[copy_bytes - 1] != 0x5a) r.error = "the copy's bytes";
  r.d2h_gb_per_s = best;
  cleanup();
  r.ran = true;
  return r;
}

}  // namespace rtft::health
