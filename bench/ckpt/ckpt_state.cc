#include "bench/ckpt/ckpt_state.h"

#include <cstdio>

#include "bench/common/gpu_util.h"

namespace rtft::bench {

StatusOr<std::unique_ptr<BenchState>> BenchState::Create(const StateSpec& spec) {
  const uint64_t elements = spec.bytes / sizeof(float);
  if (spec.tensors == 0 || elements < spec.tensors)
    return Status::InvalidArgument("cannot split " + std::to_string(spec.bytes) + " bytes into " +
                                   std::to_string(spec.tensors) + " float32 tensors");
  std::unique_ptr<BenchState> s(new BenchState());
  s->gpu_ = spec.gpu;
  const uint64_t each = elements / spec.tensors;
  const uint64_t extra = elements % spec.tensors;  // spread over the first tensors
  for (uint64_t i = 0; i < spec.tensors; ++i)
    RTFT_RETURN_IF_ERROR(s->AddTensor(i, each + (i < extra ? 1 : 0)));
  for (const TensorDesc& t : s->tensors_) s->provider_.AddTensor(t);
  return s;
}

Status BenchState::AddTensor(uint64_t index, uint64_t elements) {
  const uint64_t bytes = elements * sizeof(float);
  char name[64];
  std::snprintf(name, sizeof(name), "model/layer%05llu/weight",
                static_cast<unsigned long long>(index));
  TensorDesc t;
  t.name = name;
  t.dtype = DType::kFloat32;
  t.shape = {static_cast<int64_t>(elements)};
  if (gpu_) {
    RTFT_ASSIGN_OR_RETURN(void* p, GpuAlloc(bytes));
    device_.push_back(p);
    RTFT_RETURN_IF_ERROR(GpuFill(p, bytes, static_cast<int>(index % 251) + 1));
    t.data = p;
    t.memory = MemoryKind::kDevice;
    t.device = 0;
  } else {
    RTFT_ASSIGN_OR_RETURN(AlignedBuffer b,
                          AlignedBuffer::Allocate(bytes, static_cast<uint32_t>(index)));
    t.data = b.data();
    host_.push_back(std::move(b));
  }
  bytes_ += bytes;
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

BenchState::~BenchState() {
  for (void* p : device_) GpuFree(p);
}

}  // namespace rtft::bench
