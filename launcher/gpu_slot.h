// Which GPU a slot's application uses (docs/launcher.md, "GPUs"): the slot's index among the
// slots of its node, modulo the node's GPU count. dp-launch learns both without touching CUDA
// (it must never create a context: its application, or a spare's, may take any GPU of the node),
// and never narrows CUDA_VISIBLE_DEVICES. Used by main.cc; the coordinator moves devices with
// the ranks.
#pragma once

#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft::launch {

// How many GPUs the node has and where the number came from.
struct GpuCount {
  int gpus = 0;      // 0: none known (the CPU path: no device is set)
  std::string from;  // "--gpus-per-node", "CUDA_VISIBLE_DEVICES", "/proc/driver/nvidia/gpus"
};

// The flag's (or RTFT_GPUS_PER_NODE's) text: "auto" (count them) or 1..kMaxGpusPerNode.
// Returns 0 for auto.
StatusOr<int> ParseGpusPerNode(const std::string& text);

// The devices CUDA_VISIBLE_DEVICES makes visible, counted as the CUDA runtime does: its
// comma-separated entries up to the first that is no ordinal or GPU-/MIG- UUID ("", "-1" and
// Slurm's "NoDevFiles" make none).
int CountVisibleDevices(const std::string& value);

// `gpus_per_node` when given (> 0); else CUDA_VISIBLE_DEVICES's list when it is set; else the
// GPUs the NVIDIA driver lists in `proc_dir` (one directory per GPU; no CUDA call); else none.
GpuCount CountGpus(int gpus_per_node, const std::string& proc_dir = "/proc/driver/nvidia/gpus");

// The slot's index among the slots of its node: the launcher's (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCALRANKID), else its place among the slots of its host (`hosts`, index:
// slot, from the bootstrap's allgather; empty under srun), else 0.
int LocalIndex(int slot, const std::vector<std::string>& hosts);

// The device of the slot with `local_index` on a node of `gpus` GPUs (-1 without any).
inline int SlotDevice(int local_index, int gpus) { return gpus > 0 ? local_index % gpus : -1; }

}  // namespace rtft::launch
