// OffloadOptimizer: validates the parameters, lays out the flat host state, and runs each step
// on the CPU workers (host parameters) or through the GPU engine (device parameters), with the
// share controller choosing the GPU's part and logging predicted against measured time.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/build_config.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/thread_pool.h"
#include "offload/cpu/cpu_adam.h"
#include "offload/optimizer_state.h"
#include "offload/perf_model.h"
#include "offload/share_controller.h"
#include "rtft/offload.h"

#if RTFT_WITH_CUDA
#include "offload/gpu/gpu_engine.h"
#endif

namespace rtft {

const char* OffloadModeName(OffloadMode mode) {
  switch (mode) {
    case OffloadMode::kCpu:
      return "cpu";
    case OffloadMode::kGpu:
      return "gpu";
    case OffloadMode::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

bool ParseOffloadMode(const std::string& text, OffloadMode* mode) {
  for (OffloadMode m : {OffloadMode::kCpu, OffloadMode::kGpu, OffloadMode::kInterleaved}) {
    if (text == OffloadModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

OffloadOptimizer::~OffloadOptimizer() = default;

namespace offload {
namespace {

using Clock = std::chrono::steady_clock;

// CPU tasks are this long at most: 1 Mi elements is 12 MiB of state, long enough to amortize
// scheduling and short enough to balance threads.
constexpr uint64_t kTaskElements = 1u << 20;

// The dtypes the AdamW kernels (CPU and GPU) load and store; their switches treat anything else
// as float32, so nothing else may get past ValidateParams. float64 is refused rather than
// narrowed: the master copy, momentum and variance are float32, and a float64 parameter written
// back through them would lose its precision at every step without a word.
bool KernelDType(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
      return true;
    case DType::kInt8:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kFloat64:
      return false;
  }
  return false;
}

Status ValidateParams(const std::vector<OffloadParam>& params) {
  if (params.empty()) return Status::InvalidArgument("offload optimizer: no parameters");
  std::set<std::string> names;
  for (const OffloadParam& p : params) {
    const std::string what = "offload parameter '" + p.name + "'";
    if (p.name.empty()) return Status::InvalidArgument("offload parameter without a name");
    if (!names.insert(p.name).second) return Status::InvalidArgument(what + " appears twice");
    if (p.dtype == DType::kFloat64 || p.grad_dtype == DType::kFloat64)
      return Status::InvalidArgument(
          what +
          ": float64 is not supported (the optimizer keeps float32 master weights and "
          "moments, which would round a float64 parameter at every step); use float32, "
          "float16 or bfloat16");
    if (!KernelDType(p.dtype) || !KernelDType(p.grad_dtype))
      return Status::InvalidArgument(what +
                                     ": dtype and grad_dtype must be float32/16 or bfloat16");
    if (p.elements > 0 && p.data == nullptr) return Status::InvalidArgument(what + ": no data");
    if (!p.shape.empty()) {
      uint64_t n = 1;
      for (int64_t d : p.shape) n *= d < 0 ? 0 : static_cast<uint64_t>(d);
      if (n != p.elements) return Status::InvalidArgument(what + ": shape does not match elements");
    }
    if (p.shard.sharded()) {
      const size_t rank = p.shape.empty() ? 1 : p.shape.size();
      if (p.shard.global_shape.size() != rank || p.shard.offset.size() != rank)
        return Status::InvalidArgument(what + ": its shard coordinates must have its shape's rank");
    }
    if (p.memory != params[0].memory || p.device != params[0].device)
      return Status::InvalidArgument(what + ": all parameters must be in the same memory/device");
  }
  uint64_t total = 0;
  for (const OffloadParam& p : params) total += p.elements;
  if (total == 0) return Status::InvalidArgument("offload optimizer: the parameters are empty");
  return Status::Ok();
}

struct Settings {
  uint64_t subgroup_elements;
  int threads;
  uint64_t budget;
  CpuIsa isa;
  int calibration_steps;
  int search_steps;
  double drift;
};

StatusOr<Settings> ReadSettings(const OffloadOptions& o) {
  Settings s;
  s.subgroup_elements = o.subgroup_elements;
  if (s.subgroup_elements == 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t v, ParamInt(Param::kOffloadSubgroupElements));
    if (v <= 0) return Status::InvalidArgument("RTFT_OFFLOAD_SUBGROUP_ELEMENTS must be positive");
    s.subgroup_elements = static_cast<uint64_t>(v);
  }
  s.threads = o.cpu_threads;
  if (s.threads <= 0) {
    RTFT_ASSIGN_OR_RETURN(int64_t v, ParamInt(Param::kOffloadCpuThreads));
    s.threads = v > 0 ? static_cast<int>(v) : static_cast<int>(std::thread::hardware_concurrency());
    s.threads = std::max(1, s.threads);
  }
  s.budget = o.gpu_budget_bytes;
  if (s.budget == 0) {
    RTFT_ASSIGN_OR_RETURN(s.budget, ParamBytes(Param::kOffloadGpuBudget));
  }
  const std::string kernel =
      o.cpu_kernel.empty() ? ParamString(Param::kOffloadCpuKernel) : o.cpu_kernel;
  if (!ParseCpuIsa(kernel, &s.isa))
    return Status::InvalidArgument("CPU AdamW kernel '" + kernel +
                                   "' is unknown or not supported by this CPU");
  RTFT_ASSIGN_OR_RETURN(int64_t steps, ParamInt(Param::kOffloadCalibrationSteps));
  s.calibration_steps = static_cast<int>(std::max<int64_t>(1, steps));
  RTFT_ASSIGN_OR_RETURN(int64_t search, ParamInt(Param::kOffloadSearchSteps));
  s.search_steps = static_cast<int>(std::clamp<int64_t>(search, 0, 1000));
  RTFT_ASSIGN_OR_RETURN(int64_t drift, ParamInt(Param::kOffloadDriftPercent));
  s.drift = static_cast<double>(std::max<int64_t>(1, drift)) / 100.0;
  if (o.static_gpu_fraction > 1.0)
    return Status::InvalidArgument("static_gpu_fraction must be in [0, 1] (or negative)");
  return s;
}

class OffloadOptimizerImpl : public OffloadOptimizer {
 public:
  OffloadOptimizerImpl(std::shared_ptr<OptimizerState> state, const OffloadOptions& options,
                       const Settings& settings)
      : state_(std::move(state)), options_(options), settings_(settings) {
    kernel_ = GetAdamWKernel(settings.isa);
    if (settings.threads > 1)
      pool_ = std::make_unique<ThreadPool>(settings.threads - 1, "rtft-adamw");
  }

  Status Init() {
    // A provider may outlive the optimizer: its Restored() reaches Sync only while it lives.
    state_->SetRestored([this] { return SyncParamsFromMaster(); });
    const bool device = state_->layout.params[0].memory == MemoryKind::kDevice;
    mode_ = options_.mode;
    if (!device) {
      if (mode_ == OffloadMode::kGpu)
        return Status::InvalidArgument("offload mode gpu needs parameters in device memory");
      if (mode_ == OffloadMode::kInterleaved)
        RTFT_LOG(kInfo, kLogOffload) << "host parameters: every subgroup is updated on the CPU";
      mode_ = OffloadMode::kCpu;
      for (size_t i = 0; i < state_->layout.params.size(); ++i) {
        const OffloadParam& p = state_->layout.params[i];
        ConvertToFloat(p.data, p.dtype,
                       state_->master.floats() + state_->layout.param_flat_offset[i], p.elements);
      }
      return Status::Ok();
    }
#if RTFT_WITH_CUDA
    CpuWorkers workers;
    workers.pool = pool_.get();
    workers.kernel = kernel_;
    workers.threads = settings_.threads;
    RTFT_ASSIGN_OR_RETURN(gpu_, CreateGpuEngine(state_, workers, settings_.budget));
    RTFT_RETURN_IF_ERROR(gpu_->LoadMasterFromParams());
    if (mode_ == OffloadMode::kGpu) RTFT_RETURN_IF_ERROR(gpu_->MakeResident());
    OffloadShape shape;
    shape.elements = state_->layout.elements;
    shape.subgroups = state_->layout.subgroups.size();
    shape.subgroup_elements = state_->layout.subgroup_elements;
    shape.param_bytes = DTypeSize(state_->layout.params[0].dtype);
    shape.gpu_budget_bytes = settings_.budget;
    double fraction = options_.static_gpu_fraction;
    if (mode_ == OffloadMode::kCpu) fraction = 0;
    ShareControllerOptions control;
    control.cpu_threads = settings_.threads;
    control.calibration_steps = settings_.calibration_steps;
    control.drift_fraction = settings_.drift;
    control.static_fraction = fraction;
    control.search.max_steps = settings_.search_steps;
    controller_ = std::make_unique<ShareController>(shape, control);
    if (mode_ == OffloadMode::kInterleaved && gpu_->slots() == 0)
      RTFT_LOG(kWarn, kLogOffload) << "GPU budget " << settings_.budget
                                   << " bytes holds no subgroup buffer; updating on the CPU only";
    return Status::Ok();
#else
    return Status::Unimplemented("device parameters given, but rt-ft was built without CUDA");
#endif
  }

  Status Step(const std::vector<const void*>& grads) override {
    const Layout& l = state_->layout;
    if (grads.size() != l.params.size())
      return Status::InvalidArgument("Step: " + std::to_string(grads.size()) + " gradients for " +
                                     std::to_string(l.params.size()) + " parameters");
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i] == nullptr && l.params[i].elements > 0)
        return Status::InvalidArgument("Step: no gradient for '" + l.params[i].name + "'");
    const int64_t step = state_->step + 1;
    const AdamWStep s = MakeAdamWStep(state_->config, step);
    const auto start = Clock::now();
    OffloadStepStats stats;
    stats.step = step;
    if (gpu_ == nullptr) {
      RTFT_RETURN_IF_ERROR(StepHost(s, grads));
      stats.cpu_subgroups = l.subgroups.size();
      stats.cpu_elements = l.elements;
    } else {
      RTFT_RETURN_IF_ERROR(StepDevice(s, grads, &stats));
    }
    stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    state_->step = step;
    last_ = stats;
    // Per step at debug level: the share controller logs each search step and the settled share.
    if (controller_ && stats.predicted_seconds > 0)
      RTFT_LOG(kDebug, kLogOffload)
          << "step " << step << ": " << stats.gpu_subgroups << "/" << l.subgroups.size()
          << " subgroups on the GPU" << (stats.calibrating ? " (calibrating)" : "")
          << (stats.searching ? " (searching)" : "") << ", predicted "
          << stats.predicted_seconds * 1e3 << " ms, measured " << stats.seconds * 1e3 << " ms";
    return Status::Ok();
  }

  void set_lr(double lr) override { state_->config.lr = lr; }
  const AdamWConfig& config() const override { return state_->config; }
  int64_t step_count() const override { return state_->step; }
  OffloadMode mode() const override { return mode_; }
  uint64_t subgroups() const override { return state_->layout.subgroups.size(); }
  uint64_t elements() const override { return state_->layout.elements; }
  const OffloadStepStats& last_step() const override { return last_; }
  const char* cpu_kernel() const override { return CpuIsaName(settings_.isa); }

  std::shared_ptr<StateProvider> state_provider() override {
    return std::make_shared<OptimizerStateProvider>(state_);
  }
  ~OffloadOptimizerImpl() override { state_->SetRestored(nullptr); }

  Status SyncParamsFromMaster() override {
#if RTFT_WITH_CUDA
    if (gpu_ != nullptr) return gpu_->WriteParamsFromMaster();
#endif
    for (size_t i = 0; i < state_->layout.params.size(); ++i) {
      const OffloadParam& p = state_->layout.params[i];
      ConvertFromFloat(state_->master_ptr + state_->layout.param_flat_offset[i], p.data, p.dtype,
                       p.elements);
    }
    return Status::Ok();
  }

  Status ReadMaster(size_t param, float* out) const override {
    if (param >= state_->layout.params.size())
      return Status::OutOfRange("ReadMaster: no parameter " + std::to_string(param));
    const float* src = state_->master_ptr + state_->layout.param_flat_offset[param];
    const size_t bytes = state_->layout.params[param].elements * sizeof(float);
#if RTFT_WITH_CUDA
    if (state_->memory == MemoryKind::kDevice) return gpu_->CopyToHost(out, src, bytes);
#endif
    std::memcpy(out, src, bytes);
    return Status::Ok();
  }

 private:
  // Host parameters: every task on the CPU, gradients and parameters used in place.
  Status StepHost(const AdamWStep& s, const std::vector<const void*>& grads) {
    const Layout& l = state_->layout;
    std::vector<const CpuTask*> tasks;
    for (const Subgroup& g : l.subgroups)
      for (const CpuTask& t : g.tasks) tasks.push_back(&t);
    auto run = [&](size_t i) {
      const Segment& seg = tasks[i]->segment;
      const OffloadParam& p = l.params[seg.param];
      AdamWSpan a;
      a.master = state_->master.floats() + seg.flat_offset;
      a.m = state_->m.floats() + seg.flat_offset;
      a.v = state_->v.floats() + seg.flat_offset;
      a.grad =
          static_cast<const char*>(grads[seg.param]) + seg.param_offset * DTypeSize(p.grad_dtype);
      a.grad_dtype = p.grad_dtype;
      a.low = static_cast<char*>(p.data) + seg.param_offset * DTypeSize(p.dtype);
      a.low_dtype = p.dtype;
      a.n = seg.n;
      kernel_(s, a);
    };
    if (pool_) {
      pool_->ParallelFor(tasks.size(), run);
    } else {
      for (size_t i = 0; i < tasks.size(); ++i) run(i);
    }
    return Status::Ok();
  }

  Status StepDevice(const AdamWStep& s, const std::vector<const void*>& grads,
                    OffloadStepStats* stats) {
#if RTFT_WITH_CUDA
    const Layout& l = state_->layout;
    StepTiming timing;
    if (mode_ == OffloadMode::kGpu) {
      RTFT_RETURN_IF_ERROR(gpu_->Step(s, grads, l.subgroups.size(), &timing));
      stats->gpu_subgroups = l.subgroups.size();
      stats->gpu_elements = l.elements;
      return Status::Ok();
    }
    const ShareChoice choice = controller_->Next();
    const SharePhase phase = controller_->phase();
    const auto start = Clock::now();
    RTFT_RETURN_IF_ERROR(gpu_->Step(s, grads, choice.gpu_subgroups, &timing));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    controller_->Observe(timing, seconds);
    const uint64_t g = std::min<uint64_t>(choice.gpu_subgroups, l.subgroups.size());
    stats->gpu_subgroups = g;
    stats->cpu_subgroups = l.subgroups.size() - g;
    stats->gpu_elements = timing.gpu_elements;
    stats->cpu_elements = timing.cpu_elements;
    stats->predicted_seconds = choice.predicted_seconds;
    stats->calibrating = phase == SharePhase::kCalibrating;
    stats->searching = phase == SharePhase::kSearching;
    stats->model_gpu_subgroups = controller_->model_choice().gpu_subgroups;
    return Status::Ok();
#else
    return Status::Unimplemented("built without CUDA");
#endif
  }

  std::shared_ptr<OptimizerState> state_;
  OffloadOptions options_;
  Settings settings_;
  OffloadMode mode_ = OffloadMode::kCpu;
  AdamWKernelFn kernel_ = nullptr;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ShareController> controller_;
#if RTFT_WITH_CUDA
  std::unique_ptr<GpuEngine> gpu_;
#else
  void* gpu_ = nullptr;
#endif
  OffloadStepStats last_;
};

}  // namespace
}  // namespace offload

StatusOr<std::unique_ptr<OffloadOptimizer>> OffloadOptimizer::Create(
    std::vector<OffloadParam> params, const OffloadOptions& options) {
  using namespace offload;  // NOLINT
  RTFT_RETURN_IF_ERROR(ValidateParams(params));
  RTFT_ASSIGN_OR_RETURN(Settings settings, ReadSettings(options));
  auto state = std::make_shared<OptimizerState>();
  state->layout = BuildLayout(std::move(params), settings.subgroup_elements, kTaskElements);
  state->config = options.adamw;
  state->prefix = options.state_prefix;
  const size_t bytes = state->layout.elements * sizeof(float);
  const bool pinned = state->layout.params[0].memory == MemoryKind::kDevice;
  { RTFT_ASSIGN_OR_RETURN(state->master, HostArray::Allocate(bytes, pinned)); }
  { RTFT_ASSIGN_OR_RETURN(state->m, HostArray::Allocate(bytes, pinned)); }
  { RTFT_ASSIGN_OR_RETURN(state->v, HostArray::Allocate(bytes, pinned)); }
  state->master_ptr = state->master.floats();
  state->m_ptr = state->m.floats();
  state->v_ptr = state->v.floats();
  auto impl = std::make_unique<OffloadOptimizerImpl>(state, options, settings);
  RTFT_RETURN_IF_ERROR(impl->Init());
  RTFT_LOG(kInfo, kLogOffload) << "offload optimizer: " << state->layout.elements
                               << " parameters in " << state->layout.subgroups.size()
                               << " subgroups, mode " << OffloadModeName(impl->mode())
                               << ", CPU kernel " << impl->cpu_kernel() << ", " << settings.threads
                               << " CPU threads";
  return std::unique_ptr<OffloadOptimizer>(std::move(impl));
}

}  // namespace rtft
