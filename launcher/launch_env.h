// Which launcher started this dp-launch (mpirun of Open MPI or MPICH, srun, or none), read from
// the environment the launcher sets, and whether that launch can survive the loss of a slot.
#pragma once

#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft::launch {

enum class LauncherKind { kNone, kOpenMpi, kMpich, kSlurm };
const char* LauncherName(LauncherKind kind);

struct LaunchEnv {
  LauncherKind kind = LauncherKind::kNone;
  // Known to keep the survivors alive when a slot dies (false: known not to, or cannot tell).
  bool survives_slot_loss = false;
  // The slot count the launcher announces (OMPI_COMM_WORLD_SIZE, PMI_SIZE; 0: unknown). The MPI
  // bootstrap checks it: a dp-launch built against another MPI sees a world of one.
  int launcher_slots = 0;
  // This process's slot as the launcher numbers it (OMPI_COMM_WORLD_RANK, PMI_RANK,
  // SLURM_PROCID; 0 without a launcher; -1: unknown). Known before the bootstrap.
  int launcher_slot = -1;
  // Warnings to print at start (slot 0 prints them once).
  std::vector<std::string> warnings;
};

LaunchEnv DetectLaunchEnv();

// A variable the launcher, Slurm or CUDA set for this process (never an RTFT_* setting: those
// are core/param_list.h's): its value, or nullptr when it is unset or empty. dp-launch reads its
// host's environment through this one function.
const char* LauncherEnv(const char* name);
// The same as a count: kInvalidArgument when it is missing or not a non-negative decimal.
StatusOr<int> LauncherEnvInt(const char* name);

// The recovery features per launcher, for --help and docs/launcher.md.
const char* LauncherSupportText();

}  // namespace rtft::launch
