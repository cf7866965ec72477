#include "offload/optimizer_state.h"

#include <stdexcept>
#include <string>

namespace rtft::offload {

Status OptimizerStateProvider::Describe(StateDescription* out) const {
  const OptimizerState& s = *state_;
  const struct {
    const char* name;
    float* base;
  } arrays[] = {{"master", s.master_ptr}, {"exp_avg", s.m_ptr}, {"exp_avg_sq", s.v_ptr}};
  for (const auto& a : arrays) {
    for (size_t i = 0; i < s.layout.params.size(); ++i) {
      const OffloadParam& p = s.layout.params[i];
      // An empty shard is still described, so that every rank describes the same tensors.
      if (p.elements == 0 && !p.shard.sharded()) continue;
      TensorDesc t;
      t.name = s.prefix + "/" + a.name + "/" + p.name;
      t.dtype = DType::kFloat32;
      t.shape = p.shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(p.elements)} : p.shape;
      t.data = a.base + s.layout.param_flat_offset[i];
      t.memory = s.memory;
      t.device = s.device;
      t.shard = p.shard;
      out->tensors.push_back(std::move(t));
    }
  }
  ObjectDesc step;
  step.name = s.prefix + "/step";
  std::shared_ptr<OptimizerState> state = state_;
  step.serialize = [state]() -> StatusOr<std::string> { return std::to_string(state->step); };
  step.deserialize = [state](const std::string& bytes) -> Status {
    try {
      size_t used = 0;
      const long long v = std::stoll(bytes, &used);
      if (used != bytes.size() || v < 0) throw std::invalid_argument(bytes);
      state->step = v;
      return Status::Ok();
    } catch (const std::exception&) {
      return Status::DataLoss("optimizer step count '" + bytes + "' is not a number");
    }
  };
  out->objects.push_back(std::move(step));
  return Status::Ok();
}

}  // namespace rtft::offload
