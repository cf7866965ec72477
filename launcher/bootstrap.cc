#include "launcher/bootstrap.h"

#include <unistd.h>

#include "core/logging.h"

namespace rtft::launch {

Status CheckApplication(const LaunchOptions& options) {
  if (options.command.empty()) return Status::InvalidArgument("no application given");
  return ResolveExecutable(options.command[0]).status();
}

StatusOr<std::unique_ptr<control::Coordinator>> StartCoordinator(const LaunchOptions& options,
                                                                 const control::JobKeys& keys,
                                                                 int slots, int slot,
                                                                 bool standby) {
  const int agents = slots - (options.dedicated_coordinator ? 1 : 0);
  if (options.spares >= agents)
    return Status::InvalidArgument(
        "--spares " + std::to_string(options.spares) + " leaves no active slot among " +
        std::to_string(agents) +
        (options.dedicated_coordinator ? " (slot 0 runs only the coordinator)" : ""));
  const int64_t unit = int64_t{options.grid_tensor} * options.grid_pipeline;
  if ((agents - options.spares) % unit != 0)
    return Status::InvalidArgument("--grid " + std::to_string(options.grid_tensor) + "x" +
                                   std::to_string(options.grid_pipeline) + " does not divide the " +
                                   std::to_string(agents - options.spares) + " active slots");
  control::CoordinatorOptions c;
  c.keys = keys;
  c.slots = slots;
  c.spares = options.spares;
  c.dedicated_slot = options.dedicated_coordinator;
  c.heartbeat_timeout = options.heartbeat_timeout;
  c.join_timeout = options.join_timeout;
  c.hang = options.hang;
  c.straggler = options.straggler;
  c.max_restarts_per_slot = options.max_restarts_per_slot;
  c.on_spares_exhausted = options.on_spares_exhausted;
  c.grid_tensor = options.grid_tensor;
  c.grid_pipeline = options.grid_pipeline;
  c.self_slot = slot;
  c.standby = standby;
  c.replicate = options.StandbyIn(slots);
  c.partition_file = options.test_partition_file;
  return control::Coordinator::Start(c);
}

namespace {

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

StatusOr<BootstrapResult> BootstrapLocal(const LaunchOptions& options) {
  if (options.dedicated_coordinator)
    return Status::InvalidArgument(
        "--coordinator-slot dedicated needs a launcher that starts two slots or more: slot 0 "
        "runs only the coordinator");
  RTFT_RETURN_IF_ERROR(CheckApplication(options));
  BootstrapResult r;
  r.host = HostName();
  r.peers.push_back({r.host, static_cast<int>(getpid())});
  if (!options.job_key_file.empty()) {
    RTFT_ASSIGN_OR_RETURN(r.keys, control::LoadJobKeys(options.job_key_file));
  } else {
    RTFT_ASSIGN_OR_RETURN(r.keys, control::GenerateJobKeys());
  }
  RTFT_ASSIGN_OR_RETURN(r.coordinator, StartCoordinator(options, r.keys, 1));
  r.endpoint = r.coordinator->endpoint();
  return r;
}

StatusOr<BootstrapResult> BootstrapLauncher(const LaunchEnv& env, const LaunchOptions& options) {
  switch (env.kind) {
    case LauncherKind::kOpenMpi:
    case LauncherKind::kMpich:
      return BootstrapMpi(env, options);
    case LauncherKind::kSlurm:
      return BootstrapSlurm(options);
    case LauncherKind::kNone:
      return BootstrapLocal(options);
  }
  return Status::Internal("unknown launcher");
}

}  // namespace

StatusOr<BootstrapResult> Bootstrap(const LaunchEnv& env, const LaunchOptions& options) {
  RTFT_ASSIGN_OR_RETURN(BootstrapResult r, BootstrapLauncher(env, options));
  if (r.slot == 0 || !options.StandbyIn(r.slots)) return r;
  // Every other slot can become the standby: its coordinator listens from the start, and its
  // endpoint goes to the primary in the agent's hello. A slot without one is never appointed.
  auto standby = StartCoordinator(options, r.keys, r.slots, r.slot, /*standby=*/true);
  if (standby.ok()) {
    r.coordinator = std::move(*standby);
  } else {
    RTFT_LOG(kWarn, kLogLaunch) << "slot " << r.slot
                                << " cannot hold the standby coordinator: " << standby.status();
  }
  return r;
}

}  // namespace rtft::launch
