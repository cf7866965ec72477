// The interleaved scheduler. Per step, on the caller's thread: the CPU share's gradients are
// widened to fp32 on the GPU and copied down (two streams, one staging buffer each); the GPU
// share's subgroups are queued as a pipeline over `slots` device buffers: copy in on one stream,
// update on another, copy out on a third, each stage waiting on the previous one's event and a
// buffer reused only after its copy out completed. Nothing here blocks the host, so the caller
// then joins the CPU threads, which wait for each subgroup's gradient event, update it, and queue
// its rounded parameters for upload on a fourth stream.
#include "offload/gpu/gpu_engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "core/cuda_status.h"
#include "core/logging.h"
#include "offload/gpu/adamw_kernels.h"
#include "offload/gpu/cuda_util.h"

namespace rtft::offload {
namespace {

using namespace gpu_detail;  // NOLINT: the scheduler's own helpers (cuda_util.h)

class CudaEngine : public GpuEngine {
 public:
  CudaEngine(std::shared_ptr<OptimizerState> state, const CpuWorkers& cpu)
      : st_(std::move(state)), cpu_(cpu), device_(st_->layout.params[0].device) {}

  ~CudaEngine() override {
    cudaSetDevice(device_);
    for (cudaStream_t s : streams_) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    for (auto& evs : events_)
      for (cudaEvent_t e : evs) cudaEventDestroy(e);
    if (step_start_ != nullptr) cudaEventDestroy(step_start_);
  }

  Status Init(uint64_t budget) {
    const Layout& l = st_->layout;
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    for (cudaStream_t* s : {&in_, &run_, &out_, &up_, &grad_[0], &grad_[1]}) {
      RTFT_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "stream"));
      streams_.push_back(*s);
    }
    RTFT_RETURN_IF_ERROR(Cuda(cudaEventCreate(&step_start_), "event"));
    events_.resize(l.subgroups.size());
    for (auto& evs : events_) {
      evs.resize(kEvs);
      for (cudaEvent_t& e : evs) RTFT_RETURN_IF_ERROR(Cuda(cudaEventCreate(&e), "event"));
    }
    { RTFT_ASSIGN_OR_RETURN(low_, HostArray::Allocate(l.low_bytes, true)); }
    { RTFT_ASSIGN_OR_RETURN(grad32_, HostArray::Allocate(l.elements * sizeof(float), true)); }
    OffloadShape shape;
    shape.subgroup_elements = l.subgroup_elements;
    shape.gpu_budget_bytes = budget;
    const size_t s = l.subgroup_elements;
    for (float*& staging : staging_) {
      RTFT_ASSIGN_OR_RETURN(staging, buffers_.Alloc(s));
    }
    const int slots = SlotsWithinBudget(shape);
    for (int i = 0; i < slots; ++i) {
      Slot slot;
      RTFT_ASSIGN_OR_RETURN(slot.master, buffers_.Alloc(s));
      RTFT_ASSIGN_OR_RETURN(slot.m, buffers_.Alloc(s));
      RTFT_ASSIGN_OR_RETURN(slot.v, buffers_.Alloc(s));
      slots_.push_back(slot);
    }
    remaining_.reset(new std::atomic<size_t>[l.subgroups.size()]);
    return Status::Ok();
  }

  int slots() const override { return static_cast<int>(slots_.size()); }

  Status LoadMasterFromParams() override {
    const Layout& l = st_->layout;
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    for (size_t i = 0; i < l.params.size(); ++i) {
      const OffloadParam& p = l.params[i];
      char* host = static_cast<char*>(low_.data()) + l.param_low_offset[i];
      RTFT_RETURN_IF_ERROR(
          Cuda(cudaMemcpy(host, p.data, p.elements * DTypeSize(p.dtype), cudaMemcpyDeviceToHost),
               "reading the parameters"));
      ConvertToFloat(host, p.dtype, st_->master.floats() + l.param_flat_offset[i], p.elements);
    }
    return Status::Ok();
  }

  Status WriteParamsFromMaster() override {
    const Layout& l = st_->layout;
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    for (size_t i = 0; i < l.params.size(); ++i) {
      const OffloadParam& p = l.params[i];
      const uint64_t flat = l.param_flat_offset[i];
      if (st_->memory == MemoryKind::kDevice) {
        RTFT_RETURN_IF_ERROR(Cuda(
            LaunchFromFloat(st_->master_ptr + flat, p.data, p.dtype, p.elements, run_), "convert"));
        continue;
      }
      char* host = static_cast<char*>(low_.data()) + l.param_low_offset[i];
      ConvertFromFloat(st_->master_ptr + flat, host, p.dtype, p.elements);
      RTFT_RETURN_IF_ERROR(
          Cuda(cudaMemcpy(p.data, host, p.elements * DTypeSize(p.dtype), cudaMemcpyHostToDevice),
               "writing the parameters"));
    }
    return Cuda(cudaStreamSynchronize(run_), "writing the parameters");
  }

  Status MakeResident() override {
    const Layout& l = st_->layout;
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    auto arrays = std::make_shared<DeviceArrays>();
    float* dev[3];
    const float* host[3] = {st_->master.floats(), st_->m.floats(), st_->v.floats()};
    for (int k = 0; k < 3; ++k) {
      RTFT_ASSIGN_OR_RETURN(dev[k], arrays->Alloc(l.elements));
      RTFT_RETURN_IF_ERROR(
          Cuda(cudaMemcpy(dev[k], host[k], l.elements * sizeof(float), cudaMemcpyHostToDevice),
               "uploading the optimizer state"));
    }
    st_->master_ptr = dev[0];
    st_->m_ptr = dev[1];
    st_->v_ptr = dev[2];
    st_->memory = MemoryKind::kDevice;
    st_->device = device_;
    st_->device_owner = arrays;
    slots_.clear();  // no streaming in resident mode
    return Status::Ok();
  }

  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    return Cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copying to the host");
  }

  Status Step(const AdamWStep& s, const std::vector<const void*>& grads, uint64_t gpu_subgroups,
              StepTiming* timing) override {
    RTFT_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "selecting the device"));
    // The application's gradients must be complete before any stream of ours reads them.
    RTFT_RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "waiting for the gradients"));
    if (st_->memory == MemoryKind::kDevice) return StepResident(s, grads, timing);
    const size_t n = st_->layout.subgroups.size();
    const size_t g = slots_.empty() ? 0 : std::min<size_t>(gpu_subgroups, n);
    // Every stream is idle here, so this marks the step's start for all of them (see Measure).
    RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(step_start_, in_), "event"));
    RTFT_RETURN_IF_ERROR(QueueGradients(grads, g));
    RTFT_RETURN_IF_ERROR(QueueGpuShare(s, grads, g));
    Status cpu = RunCpuShare(s, g, timing);
    for (cudaStream_t st : streams_) {
      Status synced = Cuda(cudaStreamSynchronize(st), "finishing the update");
      if (cpu.ok()) cpu = synced;
    }
    RTFT_RETURN_IF_ERROR(cpu);
    Measure(g, timing);
    return Status::Ok();
  }

 private:
  const void* GradAt(const std::vector<const void*>& grads, const Segment& seg) const {
    const OffloadParam& p = st_->layout.params[seg.param];
    return static_cast<const char*>(grads[seg.param]) + seg.param_offset * DTypeSize(p.grad_dtype);
  }
  void* ParamAt(const Segment& seg) const {
    const OffloadParam& p = st_->layout.params[seg.param];
    return static_cast<char*>(p.data) + seg.param_offset * DTypeSize(p.dtype);
  }
  char* LowAt(const Segment& seg) const {
    const OffloadParam& p = st_->layout.params[seg.param];
    return static_cast<char*>(low_.data()) + st_->layout.param_low_offset[seg.param] +
           seg.param_offset * DTypeSize(p.dtype);
  }

  Status StepResident(const AdamWStep& s, const std::vector<const void*>& grads,
                      StepTiming* timing) {
    const Layout& l = st_->layout;
    std::vector<cudaEvent_t>& ev = events_[0];
    RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kRunStart], run_), "event"));
    for (size_t i = 0; i < l.params.size(); ++i) {
      const OffloadParam& p = l.params[i];
      const uint64_t flat = l.param_flat_offset[i];
      AdamWSpan a{st_->master_ptr + flat,
                  st_->m_ptr + flat,
                  st_->v_ptr + flat,
                  grads[i],
                  p.grad_dtype,
                  p.data,
                  p.dtype,
                  p.elements};
      RTFT_RETURN_IF_ERROR(Cuda(LaunchAdamW(s, a, run_), "launching AdamW"));
    }
    RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kRunDone], run_), "event"));
    RTFT_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(run_), "GPU AdamW"));
    timing->gpu_elements = l.elements;
    timing->gpu_seconds = Elapsed(ev[kRunStart], ev[kRunDone]);
    return Status::Ok();
  }

  // The CPU share's gradients: widened to fp32 on the GPU, then copied to the host array.
  Status QueueGradients(const std::vector<const void*>& grads, size_t g) {
    const Layout& l = st_->layout;
    for (size_t j = g; j < l.subgroups.size(); ++j) {
      const int k = static_cast<int>((j - g) % 2);
      cudaStream_t st = grad_[k];
      const Subgroup& sg = l.subgroups[j];
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(events_[j][kGradStart], st), "event"));
      for (const Segment& seg : sg.segments) {
        float* host = grad32_.floats() + seg.flat_offset;
        const OffloadParam& p = l.params[seg.param];
        const void* src = GradAt(grads, seg);
        if (p.grad_dtype != DType::kFloat32) {
          float* staged = staging_[k] + (seg.flat_offset - sg.flat_begin);
          RTFT_RETURN_IF_ERROR(
              Cuda(LaunchToFloat(src, p.grad_dtype, staged, seg.n, st), "widening gradients"));
          src = staged;
        }
        RTFT_RETURN_IF_ERROR(
            Cuda(cudaMemcpyAsync(host, src, seg.n * sizeof(float), cudaMemcpyDeviceToHost, st),
                 "copying gradients"));
      }
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(events_[j][kGradDone], st), "event"));
    }
    return Status::Ok();
  }

  Status QueueGpuShare(const AdamWStep& s, const std::vector<const void*>& grads, size_t g) {
    const Layout& l = st_->layout;
    const size_t depth = slots_.size();
    float* host[3] = {st_->master.floats(), st_->m.floats(), st_->v.floats()};
    for (size_t i = 0; i < g; ++i) {
      const Subgroup& sg = l.subgroups[i];
      const Slot& slot = slots_[i % depth];
      float* dev[3] = {slot.master, slot.m, slot.v};
      std::vector<cudaEvent_t>& ev = events_[i];
      const size_t bytes = sg.n * sizeof(float);
      if (i >= depth)  // the buffer's previous subgroup must be back on the host
        RTFT_RETURN_IF_ERROR(
            Cuda(cudaStreamWaitEvent(in_, events_[i - depth][kOutDone], 0), "wait"));
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kInStart], in_), "event"));
      for (int k = 0; k < 3; ++k)
        RTFT_RETURN_IF_ERROR(Cuda(
            cudaMemcpyAsync(dev[k], host[k] + sg.flat_begin, bytes, cudaMemcpyHostToDevice, in_),
            "copying a subgroup in"));
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kInDone], in_), "event"));

      RTFT_RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(run_, ev[kInDone], 0), "wait"));
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kRunStart], run_), "event"));
      for (const Segment& seg : sg.segments) {
        const uint64_t off = seg.flat_offset - sg.flat_begin;
        const OffloadParam& p = l.params[seg.param];
        AdamWSpan a{slot.master + off, slot.m + off, slot.v + off, GradAt(grads, seg),
                    p.grad_dtype,      ParamAt(seg), p.dtype,      seg.n};
        RTFT_RETURN_IF_ERROR(Cuda(LaunchAdamW(s, a, run_), "launching AdamW"));
      }
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kRunDone], run_), "event"));

      RTFT_RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(out_, ev[kRunDone], 0), "wait"));
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kOutStart], out_), "event"));
      for (int k = 0; k < 3; ++k)
        RTFT_RETURN_IF_ERROR(Cuda(
            cudaMemcpyAsync(host[k] + sg.flat_begin, dev[k], bytes, cudaMemcpyDeviceToHost, out_),
            "copying a subgroup out"));
      RTFT_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev[kOutDone], out_), "event"));
    }
    return Status::Ok();
  }

  Status RunCpuShare(const AdamWStep& s, size_t g, StepTiming* timing) {
    const Layout& l = st_->layout;
    std::vector<const CpuTask*> tasks;
    for (size_t j = g; j < l.subgroups.size(); ++j) {
      remaining_[j].store(l.subgroups[j].tasks.size());
      for (const CpuTask& t : l.subgroups[j].tasks) tasks.push_back(&t);
    }
    std::vector<double> busy(tasks.size(), 0.0);
    std::mutex mu;
    Status first_error;
    auto fail = [&](Status st) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = std::move(st);
    };
    auto run = [&](size_t t) {
      const CpuTask& task = *tasks[t];
      const Segment& seg = task.segment;
      const OffloadParam& p = l.params[seg.param];
      cudaSetDevice(device_);
      Status waited = Cuda(cudaEventSynchronize(events_[task.subgroup][kGradDone]), "gradients");
      if (!waited.ok()) return fail(waited);
      const auto start = std::chrono::steady_clock::now();
      const uint64_t f = seg.flat_offset;
      AdamWSpan a{st_->master.floats() + f,
                  st_->m.floats() + f,
                  st_->v.floats() + f,
                  grad32_.floats() + f,
                  DType::kFloat32,
                  nullptr,
                  p.dtype,
                  seg.n};
      if (p.dtype != DType::kFloat32) a.low = LowAt(seg);
      cpu_.kernel(s, a);
      busy[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (remaining_[task.subgroup].fetch_sub(1) == 1) {
        for (const Segment& done : l.subgroups[task.subgroup].segments) {
          const OffloadParam& q = l.params[done.param];
          const void* src = q.dtype == DType::kFloat32
                                ? static_cast<const void*>(st_->master.floats() + done.flat_offset)
                                : LowAt(done);
          Status up = Cuda(cudaMemcpyAsync(ParamAt(done), src, done.n * DTypeSize(q.dtype),
                                           cudaMemcpyHostToDevice, up_),
                           "uploading parameters");
          if (!up.ok()) return fail(up);
        }
      }
    };
    if (cpu_.pool != nullptr) {
      cpu_.pool->ParallelFor(tasks.size(), run);
    } else {
      for (size_t t = 0; t < tasks.size(); ++t) run(t);
    }
    for (size_t t = 0; t < tasks.size(); ++t) {
      timing->cpu_busy_seconds += busy[t];
      timing->cpu_elements += tasks[t]->segment.n;
    }
    return first_error;
  }

  // Kernel time is summed (one stream runs them all). Copy time is the union of each direction's
  // copy intervals: state copies out and the two gradient streams share the device-to-host link,
  // so summing their durations charged it up to three times over and made the GPU share look
  // two to three times dearer than it is.
  void Measure(size_t g, StepTiming* t) {
    const Layout& l = st_->layout;
    std::vector<Interval> h2d, d2h;
    auto interval = [&](cudaEvent_t begin, cudaEvent_t end) {
      return Interval{Elapsed(step_start_, begin), Elapsed(step_start_, end)};
    };
    for (size_t i = 0; i < l.subgroups.size(); ++i) {
      const std::vector<cudaEvent_t>& ev = events_[i];
      const uint64_t n = l.subgroups[i].n;
      if (i < g) {
        t->gpu_elements += n;
        t->gpu_seconds += Elapsed(ev[kRunStart], ev[kRunDone]);
        t->h2d_bytes += n * kStateBytesPerElem;
        h2d.push_back(interval(ev[kInStart], ev[kInDone]));
        t->d2h_bytes += n * kStateBytesPerElem;
        d2h.push_back(interval(ev[kOutStart], ev[kOutDone]));
      } else {
        t->d2h_bytes += n * kGradBytesPerElem;
        d2h.push_back(interval(ev[kGradStart], ev[kGradDone]));
      }
    }
    t->h2d_seconds = UnionSeconds(std::move(h2d));
    t->d2h_seconds = UnionSeconds(std::move(d2h));
  }

  std::shared_ptr<OptimizerState> st_;
  CpuWorkers cpu_;
  int device_;
  cudaStream_t in_ = nullptr, run_ = nullptr, out_ = nullptr, up_ = nullptr;
  cudaStream_t grad_[2] = {nullptr, nullptr};
  std::vector<cudaStream_t> streams_;
  std::vector<std::vector<cudaEvent_t>> events_;
  cudaEvent_t step_start_ = nullptr;
  HostArray low_;     // the parameters in their dtypes, packed (CPU share's upload source)
  HostArray grad32_;  // the CPU share's gradients, fp32
  DeviceArrays buffers_;
  float* staging_[2] = {nullptr, nullptr};
  std::vector<Slot> slots_;
  std::unique_ptr<std::atomic<size_t>[]> remaining_;
};

}  // namespace

StatusOr<std::unique_ptr<GpuEngine>> CreateGpuEngine(std::shared_ptr<OptimizerState> state,
                                                     const CpuWorkers& cpu, uint64_t budget_bytes) {
  auto engine = std::make_unique<CudaEngine>(std::move(state), cpu);
  RTFT_RETURN_IF_ERROR(engine->Init(budget_bytes));
  return std::unique_ptr<GpuEngine>(std::move(engine));
}

}  // namespace rtft::offload
