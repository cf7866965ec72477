// The state that `rtft-bench ckpt` saves: `tensors` float32 tensors totalling about `bytes`, in
// host memory (one allocation each, like framework tensors) or in device memory (cudaMalloc),
// described through a CompositeProvider so that small tensors coalesce as in an application.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/common/bench_util.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft::bench {

struct StateSpec {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  bool gpu = false;
};

class BenchState {
 public:
  static StatusOr<std::unique_ptr<BenchState>> Create(const StateSpec& spec);
  ~BenchState();
  BenchState(const BenchState&) = delete;
  BenchState& operator=(const BenchState&) = delete;

  const std::vector<TensorDesc>& tensors() const { return tensors_; }
  const StateProvider& provider() const { return provider_; }
  uint64_t bytes() const { return bytes_; }  // the exact total (a multiple of 4)
  bool gpu() const { return gpu_; }

 private:
  BenchState() = default;
  Status AddTensor(uint64_t index, uint64_t elements);

  bool gpu_ = false;
  uint64_t bytes_ = 0;
  std::vector<TensorDesc> tensors_;
  std::vector<AlignedBuffer> host_;
  std::vector<void*> device_;
  CompositeProvider provider_;
};

}  // namespace rtft::bench
