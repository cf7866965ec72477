// Uses only the installed public headers and librt-ft: proves that find_package(rtft) gives a
// working include path and link line, and that the exported symbols suffice.
#include <rtft/state.h>
#include <rtft/status.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace {

rtft::Status Run() {
  std::vector<float> weights(256, 1.0f);
  std::vector<uint16_t> bias(16, 0);
  auto composite = std::make_shared<rtft::CompositeProvider>(/*small_tensor_bytes=*/4096,
                                                             /*group_bytes=*/1 << 20);
  rtft::TensorDesc w;
  w.name = "model/weights";
  w.shape = {16, 16};
  w.data = weights.data();
  composite->AddTensor(w);
  rtft::TensorDesc b;
  b.name = "model/bias";
  b.dtype = rtft::DType::kBFloat16;
  b.shape = {16};
  b.data = bias.data();
  composite->AddTensor(b);

  rtft::StateDescription state;
  RTFT_RETURN_IF_ERROR(composite->Describe(&state));
  RTFT_RETURN_IF_ERROR(rtft::ValidateDescription(state));
  if (state.tensors.size() != 2) return rtft::Status::Internal("expected two tensors");
  std::printf("tensors=%zu bytes=%llu dtypes=%s,%s groups=%d,%d\n", state.tensors.size(),
              static_cast<unsigned long long>(state.tensors[0].bytes() + state.tensors[1].bytes()),
              rtft::DTypeName(state.tensors[0].dtype), rtft::DTypeName(state.tensors[1].dtype),
              state.tensors[0].coalesce_group, state.tensors[1].coalesce_group);

  // A broken description must come back as a Status, not a crash.
  state.tensors[1].name = state.tensors[0].name;
  rtft::Status dup = rtft::ValidateDescription(state);
  std::printf("duplicate: %s\n", dup.ToString().c_str());
  if (dup.code() != rtft::StatusCode::kInvalidArgument)
    return rtft::Status::Internal("duplicate name was accepted");
  return rtft::Status::Ok();
}

}  // namespace

int main() {
  rtft::Status s = Run();
  std::printf("consumer: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
