// rtft-bench ckpt-e2e's baseline (docs/benchmarks.md, "ckpt-e2e"): the whole state written from
// the training thread, as torch.save writes it: each tensor copied to host memory when it lives
// on the GPU, written with write(2), the file fsynced and renamed into place. Nothing reads it
// back; it exists to be timed against rt-ft's checkpoint of the same state.
#pragma once

#include <string>

#include "gpu_model.h"
#include "rtft/state.h"

namespace train {

// Writes every tensor and object `state` describes to `path` (through `path`.tmp); `gpu` copies
// device tensors to the host (null where there are none).
rtft::Status BlockingSave(const rtft::StateProvider& state, GpuModel* gpu, const std::string& path);

}  // namespace train
