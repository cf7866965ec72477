// The environment variables rt-ft reads that are not its own (the RTFT_* ones are declared in
// core/param_list.h): each is read in one named function here, so that what the library takes
// from its host's launcher, shell and NCCL setup is listed in one place.
#pragma once

#include <string>

namespace rtft {

// TMPDIR, or /tmp when it is unset or empty.
std::string TempDirectory();

// A count that a launcher exported, and the variable it came from (count 0: none said).
struct LauncherCount {
  int count = 0;
  const char* from = nullptr;
};
// The processes a launcher started for the whole job: OMPI_COMM_WORLD_SIZE (mpirun), PMI_SIZE
// (MPICH's Hydra) or SLURM_STEP_NUM_TASKS (srun). dp-launch hides these from its application.
LauncherCount LauncherProcesses();
// The processes a launcher started on this node: OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or
// SLURM_NTASKS_PER_NODE ("8", or Slurm's "8(x2)").
LauncherCount LauncherLocalProcesses();

// The value of an NCCL setting (a name that starts with "NCCL_"); empty when unset or when the
// name is not an NCCL one.
std::string NcclSetting(const std::string& name);

}  // namespace rtft
