// The environment dp-launch gives the application it starts, read back by rtft::Runtime. These
// are outputs of the launcher, not tunables, so they are not in core/param_list.h; this is the one
// place that names them.
#pragma once

namespace rtft::runtime {

// ipc socket path of the slot's agent; unset: the runtime is standalone (rank 0 of 1).
constexpr const char* kEnvAgentSocket = "RTFT_AGENT_SOCKET";
// Logical rank at start (-1 for a warm spare), ranks in the epoch, the epoch and the slot.
constexpr const char* kEnvRank = "RTFT_RANK";
constexpr const char* kEnvWorldSize = "RTFT_WORLD_SIZE";
constexpr const char* kEnvEpoch = "RTFT_EPOCH";
constexpr const char* kEnvSlot = "RTFT_SLOT";
// initial | spare | restarted | activated (the role at fork time; Create() returns the final one).
constexpr const char* kEnvRole = "RTFT_ROLE";
// How many times the application was started on this slot before (0 for the first start).
constexpr const char* kEnvRestartCount = "RTFT_RESTART_COUNT";
// A directory in memory (tmpfs) that the slot's agent owns: the application's L1 snapshot and L2
// replica live there, outliving a crash of the application; the agent removes it at the end.
constexpr const char* kEnvShmDir = "RTFT_SHM_DIR";

}  // namespace rtft::runtime
