#include "bench/offload/offload_runs.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"
#include "core/thread_pool.h"
#include "offload/cpu/cpu_adam.h"

namespace rtft::bench {
namespace {

// Runs fn(t) on `threads` threads at once (the caller is thread 0).
void OnThreads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back(fn, t);
  fn(0);
  for (auto& th : others) th.join();
}

std::pair<uint64_t, uint64_t> Share(uint64_t n, int threads, int t) {
  const uint64_t per = (n / threads + 15) / 16 * 16;
  const uint64_t begin = std::min(n, per * t);
  return {begin, std::min(n, begin + per)};
}

StatusOr<float*> Floats(std::vector<AlignedBuffer>* keep, uint64_t n, uint32_t seed) {
  RTFT_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(n * sizeof(float), seed));
  float* p = reinterpret_cast<float*>(b.data());
  keep->push_back(std::move(b));
  return p;
}

// a = b + s*c, vectorized for the widest ISA this CPU has (so the triad measures memory, not
// the instruction stream), like the AdamW kernels it bounds.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Triad(float* __restrict a,
                                                                        const float* __restrict b,
                                                                        const float* __restrict c,
                                                                        uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
}

}  // namespace

StatusOr<TriadResult> RunTriad(uint64_t n, int threads, int repeat) {
  std::vector<AlignedBuffer> keep;
  RTFT_ASSIGN_OR_RETURN(float* a, Floats(&keep, n, 1));
  RTFT_ASSIGN_OR_RETURN(float* b, Floats(&keep, n, 2));
  RTFT_ASSIGN_OR_RETURN(float* c, Floats(&keep, n, 3));
  // First touch by the same threads that measure, so pages sit on their NUMA nodes.
  OnThreads(threads, [&](int t) {
    auto [lo, hi] = Share(n, threads, t);
    for (uint64_t i = lo; i < hi; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  });
  std::vector<double> times;
  for (int r = 0; r < repeat + 1; ++r) {
    const auto start = Clock::now();
    OnThreads(threads, [&](int t) {
      auto [lo, hi] = Share(n, threads, t);
      Triad(a + lo, b + lo, c + lo, hi - lo);
    });
    if (r > 0) times.push_back(SecondsSince(start));  // the first run warms up
  }
  TriadResult res;
  res.bytes = 3 * n * sizeof(float);
  res.threads = threads;
  res.gbps = Gbps(res.bytes, Median(times));
  res.gbps_moved = res.gbps * 4 / 3;
  return res;
}

StatusOr<KernelResult> RunCpuKernel(const std::string& isa_name, uint64_t n, DType dtype,
                                    int threads, int repeat) {
  offload::CpuIsa isa;
  if (!offload::ParseCpuIsa(isa_name, &isa))
    return Status::FailedPrecondition("CPU kernel " + isa_name + " not supported here");
  std::vector<AlignedBuffer> keep;
  RTFT_ASSIGN_OR_RETURN(float* master, Floats(&keep, n, 4));
  RTFT_ASSIGN_OR_RETURN(float* m, Floats(&keep, n, 5));
  RTFT_ASSIGN_OR_RETURN(float* v, Floats(&keep, n, 6));
  RTFT_ASSIGN_OR_RETURN(float* grad, Floats(&keep, n, 7));
  RTFT_ASSIGN_OR_RETURN(AlignedBuffer low, AlignedBuffer::Allocate(n * DTypeSize(dtype), 8));
  OnThreads(threads, [&](int t) {
    auto [lo, hi] = Share(n, threads, t);
    for (uint64_t i = lo; i < hi; ++i) master[i] = 0.5f, m[i] = 0.0f, v[i] = 0.0f, grad[i] = 0.01f;
  });
  const offload::AdamWKernelFn kernel = offload::GetAdamWKernel(isa);
  AdamWConfig config;
  std::vector<double> times;
  for (int r = 0; r < repeat + 1; ++r) {
    const offload::AdamWStep s = offload::MakeAdamWStep(config, r + 1);
    const auto start = Clock::now();
    OnThreads(threads, [&](int t) {
      auto [lo, hi] = Share(n, threads, t);
      offload::AdamWSpan a{master + lo, m + lo,          v + lo,
                           grad + lo,   DType::kFloat32, low.data() + lo * DTypeSize(dtype),
                           dtype,       hi - lo};
      kernel(s, a);
    });
    if (r > 0) times.push_back(SecondsSince(start));
  }
  KernelResult res;
  res.isa = offload::CpuIsaName(isa);
  res.threads = threads;
  res.params_per_s = static_cast<double>(n) / Median(times);
  return res;
}

StatusOr<std::unique_ptr<BenchModel>> BenchModel::Create(uint64_t elements, DType dtype,
                                                         bool device) {
  auto model = std::unique_ptr<BenchModel>(new BenchModel());
  model->device_ = device;
  constexpr uint64_t kTensor = 64ull << 20;
  const size_t esize = DTypeSize(dtype);
  for (uint64_t off = 0, i = 0; off < elements; off += kTensor, ++i) {
    const uint64_t n = std::min(kTensor, elements - off);
    void* p = nullptr;
    void* g = nullptr;
    if (device) {
      RTFT_ASSIGN_OR_RETURN(p, GpuAlloc(n * esize));
      model->owned_.push_back(p);
      RTFT_ASSIGN_OR_RETURN(g, GpuAlloc(n * esize));
      model->owned_.push_back(g);
      // 0x3c3c is about 0.0115 in bf16 and 1.06 in fp16; 0x3e3e: 0.186 / 1.56. Finite either way.
      RTFT_RETURN_IF_ERROR(GpuFill(p, n * esize, 0x3e));
      RTFT_RETURN_IF_ERROR(GpuFill(g, n * esize, 0x3c));
    } else {
      p = std::malloc(n * esize);
      g = std::malloc(n * esize);
      if (p == nullptr || g == nullptr) {
        std::free(p);
        std::free(g);
        return Status::ResourceExhausted("host memory for the benchmark model");
      }
      model->owned_.push_back(p);
      model->owned_.push_back(g);
      std::memset(p, 0x3e, n * esize);
      std::memset(g, 0x3c, n * esize);
    }
    OffloadParam param;
    param.name = "layer" + std::to_string(i);
    param.dtype = dtype;
    param.grad_dtype = dtype;
    param.data = p;
    param.elements = n;
    param.memory = device ? MemoryKind::kDevice : MemoryKind::kHost;
    model->params_.push_back(param);
    model->grads_.push_back(g);
  }
  return model;
}

BenchModel::~BenchModel() {
  for (void* p : owned_) {
    if (device_) {
      GpuFree(p);
    } else {
      std::free(p);
    }
  }
}

StatusOr<StepResult> RunOptimizer(const BenchModel& model, const OffloadOptions& options,
                                  int warmup, int steps, int max_settle_steps) {
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<OffloadOptimizer> opt,
                        OffloadOptimizer::Create(model.params(), options));
  StepResult res;
  auto choosing = [&] { return opt->last_step().calibrating || opt->last_step().searching; };
  int done = 0;
  while (done < warmup || (choosing() && done < std::max(warmup, max_settle_steps))) {
    RTFT_RETURN_IF_ERROR(opt->Step(model.grads()));
    ++done;
    if (choosing()) res.settle_steps = done;
  }
  res.settled = !choosing();
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    RTFT_RETURN_IF_ERROR(opt->Step(model.grads()));
    times.push_back(opt->last_step().seconds);
    if (choosing()) res.searched_while_measuring = true;
  }
  res.model_gpu_subgroups = opt->last_step().model_gpu_subgroups;
  res.update_s = Median(times);
  res.predicted_s = opt->last_step().predicted_seconds;
  res.gpu_subgroups = opt->last_step().gpu_subgroups;
  res.subgroups = opt->subgroups();
  res.cpu_kernel = opt->cpu_kernel();
  return res;
}

}  // namespace rtft::bench
