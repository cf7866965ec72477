// The state of an offloaded AdamW optimizer, shared between the optimizer and its state provider
// so that a checkpoint described between steps stays valid while the engine copies it: the
// layout, the fp32 master/m/v arrays (pinned host memory, or device memory in the resident GPU
// mode) and the step count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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

  // What the provider's Restored() runs: the optimizer's SyncParamsFromMaster while it lives.
  void SetRestored(std::function<Status()> fn) {
    std::lock_guard<std::mutex> lock(restored_mu);
    restored = std::move(fn);
  }
  Status Restored() {
    std::lock_guard<std::mutex> lock(restored_mu);
    if (!restored)
      return Status::FailedPrecondition(
          "the offload optimizer of this state was destroyed: nothing to write the restored "
          "master weights back to");
    return restored();
  }

 private:
  std::mutex restored_mu;
  std::function<Status()> restored;
};

// "<prefix>/master/<param>", "<prefix>/exp_avg/<param>", "<prefix>/exp_avg_sq/<param>" (fp32,
// the parameter's shape) and the object "<prefix>/step" (decimal text).
class OptimizerStateProvider : public StateProvider {
 public:
  explicit OptimizerStateProvider(std::shared_ptr<OptimizerState> state)
      : state_(std::move(state)) {}
  Status Describe(StateDescription* out) const override;
  Status Restored() const override { return state_->Restored(); }

 private:
  std::shared_ptr<OptimizerState> state_;
};

}  // namespace rtft::offload
