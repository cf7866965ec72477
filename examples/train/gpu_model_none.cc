// rt-ft built without CUDA: `rtft-train --device cuda` is refused when the model is made.
#include "gpu_model.h"

namespace train {

struct GpuModel::Handles {};

rtft::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const ModelShape&, uint64_t, int, int) {
  return rtft::Status::Unimplemented("--device cuda: rt-ft was built without CUDA");
}
GpuModel::~GpuModel() = default;
void* GpuModel::stream() const { return nullptr; }
rtft::StatusOr<void*> GpuModel::Alloc(size_t) { return rtft::Status::Unimplemented("no CUDA"); }
rtft::StatusOr<void*> GpuModel::AllocHost(size_t) { return rtft::Status::Unimplemented("no CUDA"); }
rtft::StatusOr<float> GpuModel::LossAndGradient(const std::vector<float>&,
                                                const std::vector<int>&) {
  return rtft::Status::Unimplemented("no CUDA");
}
rtft::Status GpuModel::Copy(void*, const void*, size_t) {
  return rtft::Status::Unimplemented("no CUDA");
}
rtft::Status GpuModel::Sync() { return rtft::Status::Unimplemented("no CUDA"); }

}  // namespace train
