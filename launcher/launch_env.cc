#include "launcher/launch_env.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace rtft::launch {

const char* LauncherEnv(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

StatusOr<int> LauncherEnvInt(const char* name) {
  const char* v = LauncherEnv(name);
  char* end = nullptr;
  const long n = v ? std::strtol(v, &end, 10) : -1;
  if (!v || end == v || *end != '\0' || n < 0 || n > (1L << 30))
    return Status::InvalidArgument(std::string(name) + " is missing or not a number");
  return static_cast<int>(n);
}

namespace {

const char* Env(const char* name) { return LauncherEnv(name); }

bool Truthy(const char* v) {
  return v && (!std::strcmp(v, "1") || !std::strcmp(v, "true") || !std::strcmp(v, "yes") ||
               !std::strcmp(v, "on"));
}

int SlotFrom(const char* v) {
  if (!v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n >= 0 && n < 1000000 ? static_cast<int>(n) : -1;
}

}  // namespace

const char* LauncherName(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kNone:
      return "none";
    case LauncherKind::kOpenMpi:
      return "Open MPI mpirun";
    case LauncherKind::kMpich:
      return "MPICH mpiexec (Hydra)";
    case LauncherKind::kSlurm:
      return "srun";
  }
  return "?";
}

LaunchEnv DetectLaunchEnv() {
  LaunchEnv env;
  env.launcher_slot = 0;
  if (Env("OMPI_COMM_WORLD_RANK")) {
    env.launcher_slot = SlotFrom(Env("OMPI_COMM_WORLD_RANK"));
    env.kind = LauncherKind::kOpenMpi;
    if (const char* size = Env("OMPI_COMM_WORLD_SIZE")) env.launcher_slots = std::atoi(size);
    // mpirun --enable-recovery exports its MCA setting to every process it starts.
    env.survives_slot_loss = Truthy(Env("OMPI_MCA_orte_enable_recovery"));
    if (!env.survives_slot_loss)
      env.warnings.push_back(
          "mpirun was started without --enable-recovery (OMPI_MCA_orte_enable_recovery is not "
          "set): Open MPI will kill every slot when one dies, so no failure can be survived. "
          "Run: mpirun --enable-recovery ... dp-launch ...");
    else
      env.warnings.push_back(
          "note: under mpirun --enable-recovery, Open MPI 4.1 exits 0 whatever the processes "
          "return; the job's exit code is in the last line of slot 0 and in "
          "--exit-code-file/RTFT_EXIT_CODE_FILE");
  } else if (Env("SLURM_PROCID") && Env("SLURM_NTASKS")) {
    env.kind = LauncherKind::kSlurm;
    env.launcher_slot = SlotFrom(Env("SLURM_PROCID"));
    // srun exports the variable when it was given in the environment; the option
    // --kill-on-bad-exit and the cluster's KillOnBadExit are not visible to the task.
    const char* kill = Env("SLURM_KILL_BAD_EXIT");
    env.survives_slot_loss = kill && !Truthy(kill);
    if (Truthy(kill))
      env.warnings.push_back(
          "SLURM_KILL_BAD_EXIT=1: srun kills every task when one exits with an error, so no "
          "failure can be survived. Run: srun --kill-on-bad-exit=0 dp-launch ...");
    else if (!kill)
      env.warnings.push_back(
          "cannot tell whether srun runs with --kill-on-bad-exit=0 (the option is not visible "
          "to the tasks); with KillOnBadExit=1 a lost slot ends the job. Run srun "
          "--kill-on-bad-exit=0 with SLURM_KILL_BAD_EXIT=0 exported to silence this");
    if (!Env("SLURM_NO_KILL") && Env("SLURM_JOB_NUM_NODES") &&
        std::strcmp(Env("SLURM_JOB_NUM_NODES"), "1") != 0)
      env.warnings.push_back(
          "the allocation was not made with --no-kill (SLURM_NO_KILL unset): Slurm ends the "
          "whole job when a node fails; allocate with sbatch/salloc --no-kill to survive it");
  } else if (Env("PMI_RANK") || Env("PMIX_RANK") || Env("MPI_LOCALRANKID")) {
    env.kind = LauncherKind::kMpich;
    env.launcher_slot = SlotFrom(Env("PMI_RANK") ? Env("PMI_RANK") : Env("PMIX_RANK"));
    if (const char* size = Env("PMI_SIZE")) env.launcher_slots = std::atoi(size);
    // Measured with MPICH 4.0.2: hydra_pmi_proxy SIGKILLs the other processes as soon as one it
    // started dies by a signal; -disable-auto-cleanup and MPIR_CVAR_ENABLE_FT change nothing.
    env.warnings.push_back(
        "MPICH's mpiexec (Hydra) ends the whole job when any dp-launch dies by a signal, even "
        "with -disable-auto-cleanup: application crashes and hangs are restarted on their slot, "
        "but a lost slot cannot be survived and spares are never used. For slot loss run under "
        "Open MPI's mpirun --enable-recovery or srun --kill-on-bad-exit=0");
  }
  return env;
}

const char* LauncherSupportText() {
  return "Launchers and what survives:\n"
         "  mpirun --enable-recovery (Open MPI 4.1): application crash/hang restarts, slot loss\n"
         "      (spare swap), spares-exhausted policies. mpirun itself exits 0: read the job's\n"
         "      exit code from --exit-code-file or slot 0's last line. Without\n"
         "      --enable-recovery a lost slot ends the job (dp-launch warns).\n"
         "  mpiexec (MPICH Hydra; dp-launch built with -DRTFT_MPI=mpich): application crash/hang\n"
         "      restarts and exit codes only; a lost slot ends the job, even with\n"
         "      -disable-auto-cleanup (always warned).\n"
         "  srun --kill-on-bad-exit=0 (no MPI; allocation with --no-kill): as mpirun; needs\n"
         "      --job-key-file on a path every node reads; srun exits with the job's code.\n"
         "  no launcher: one slot; application restarts only.\n"
         "Slot 0 hosts the coordinator: losing slot 0 ends the job (exit code 1).\n";
}

}  // namespace rtft::launch
