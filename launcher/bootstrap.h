// Bootstrap: who is who in the job, and where the coordinator is. Under mpirun, MPI gives the
// slot number and count, one allgather collects every slot's host and pid, slot 0 starts the
// coordinator and broadcasts its endpoint (and the generated job keys), then MPI is finalized at
// once, while every process is known to be alive: no later MPI call can involve a dead process.
// Under srun, SLURM_* variables give the slots and a file next to the job key file carries the
// endpoint. Without a launcher the job is one slot.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "control/coordinator/coordinator.h"
#include "control/wire/keys.h"
#include "launcher/launch_env.h"
#include "launcher/launch_options.h"
#include "rtft/status.h"

namespace rtft::launch {

struct Peer {
  std::string host;
  int pid = 0;
};

struct BootstrapResult {
  int slot = 0;
  int slots = 1;
  std::string host;
  std::vector<Peer> peers;  // index: slot; empty where the launcher cannot tell (srun)
  std::string endpoint;
  control::JobKeys keys;
  // Slot 0's primary; on the other slots, when the job has a standby, the slot's
  // standby-capable coordinator (the primary may appoint it).
  std::unique_ptr<control::Coordinator> coordinator;
};

StatusOr<BootstrapResult> Bootstrap(const LaunchEnv& env, const LaunchOptions& options);

// Shared by the launchers: the coordinator of a job of `slots` slots, started on slot 0 (the
// primary) or, `standby`, on slot `slot` (standby-capable).
StatusOr<std::unique_ptr<control::Coordinator>> StartCoordinator(const LaunchOptions& options,
                                                                 const control::JobKeys& keys,
                                                                 int slots, int slot = 0,
                                                                 bool standby = false);

// Every slot checks before it joins that it can execute the application: a missing or
// non-executable APP is bad usage (exit 2) of the whole job, not a crash to restart.
Status CheckApplication(const LaunchOptions& options);

// The prefix of an error that slot 0 decided and every slot received (slot 0 reports it).
constexpr const char* kFromSlotZero = "slot 0: ";

// srun: where slot 0 publishes the endpoint (removed by slot 0 at the end).
std::string SlurmEndpointFile(const std::string& key_file);

// Internal to the bootstrap files.
StatusOr<BootstrapResult> BootstrapMpi(const LaunchEnv& env, const LaunchOptions& options);
StatusOr<BootstrapResult> BootstrapSlurm(const LaunchOptions& options);

}  // namespace rtft::launch
