// The state of an offloaded AdamW optimizer, shared between the optimizer and its state provider
// so that a checkpoint described between steps stays valid while the engine copies it: the
// layout, the fp32 master/m/v arrays (pinned host memory, or device memory in the resident GPU
// mode) and the step count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offload/host_array.h"
#include "offload/layout.h"
#include "rtft/offload.h"
#include "rtft/state.h"

namespace rtft::offload {

struct OptimizerState {
  Layout layout;
  AdamWConfig config;
  std::string prefix;
  int64_t step = 0;

  HostArray master, m, v;  // the flat fp32 state on the host
  // Where the authoritative state is: the host arrays, or device arrays (resident mode) kept
  // alive by device_owner.
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;
  float* master_ptr = nullptr;
  float* m_ptr = nullptr;
  float* v_ptr = nullptr;
  std::shared_ptr<void> device_owner;
};

// "<prefix>/master/<param>", "<prefix>/exp_avg/<param>", "<prefix>/exp_avg_sq/<param>" (fp32,
// the parameter's shape) and the object "<prefix>/step" (decimal text).
class OptimizerStateProvider : public StateProvider {
 public:
  explicit OptimizerStateProvider(std::shared_ptr<OptimizerState> state)
      : state_(std::move(state)) {}
  Status Describe(StateDescription* out) const override;

 private:
  std::shared_ptr<OptimizerState> state_;
};

}  // namespace rtft::offload
