// The state crash_writer saves: every byte is a function of the version, so a reader can tell
// whether a file holds exactly one version's state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rtft/state.h"

namespace rtft {

struct CrashState {
  std::vector<uint32_t> big = std::vector<uint32_t>(3 << 20 >> 2);  // 3 MiB: 12 chunks
  std::vector<std::vector<uint32_t>> small =
      std::vector<std::vector<uint32_t>>(64, std::vector<uint32_t>(300));
  uint64_t version = 0;
  CompositeProvider provider{/*small_tensor_bytes=*/65536, /*group_bytes=*/256 << 10};

  CrashState() {
    provider.AddTensor(Desc("big", &big));
    for (size_t i = 0; i < small.size(); ++i)
      provider.AddTensor(Desc("small/" + std::to_string(i), &small[i]));
    provider.AddObject(
        {"version", [this] { return StatusOr<std::string>(std::to_string(version)); }, nullptr});
  }

  static uint32_t Value(uint64_t version, size_t tensor, size_t i) {
    return static_cast<uint32_t>(version * 2654435761u + tensor * 40503u + i);
  }

  void Fill(uint64_t v) {
    version = v;
    for (size_t i = 0; i < big.size(); ++i) big[i] = Value(v, 0, i);
    for (size_t t = 0; t < small.size(); ++t)
      for (size_t i = 0; i < small[t].size(); ++i) small[t][i] = Value(v, t + 1, i);
  }

 private:
  static TensorDesc Desc(const std::string& name, std::vector<uint32_t>* data) {
    TensorDesc t;
    t.name = name;
    t.dtype = DType::kInt32;
    t.shape = {static_cast<int64_t>(data->size())};
    t.data = data->data();
    return t;
  }
};

}  // namespace rtft
