// dp-launch: one per slot, under `mpirun --enable-recovery` or `srun --kill-on-bad-exit=0`.
// Bootstraps the job (MPI or Slurm variables), hosts the coordinator on slot 0, then runs the
// slot's agent, which starts and supervises the application.
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "control/wire/keys.h"
#include "core/logging.h"
#include "core/params.h"
#include "launcher/agent.h"
#include "launcher/bootstrap.h"
#include "launcher/coordinator_host.h"
#include "launcher/gpu_slot.h"
#include "launcher/job_end.h"
#include "launcher/launch_env.h"
#include "launcher/launch_options.h"

namespace rtft::launch {
namespace {

const char* kDescription =
    "dp-launch: runs APP under rt-ft's fault tolerance, one dp-launch per slot.\n"
    "  mpirun -np N --enable-recovery dp-launch [options] -- APP [ARGS]\n"
    "  srun --kill-on-bad-exit=0 dp-launch --job-key-file F [options] -- APP [ARGS]\n"
    "Exit codes: the job's (0 when every rank's application exited 0 or checkpoint-and-exit\n"
    "completed; else the first failing application's code; 1 when the job could not start or\n"
    "go on: spares ran out under `fail`, slot 0 was lost, the bootstrap did not complete in\n"
    "--join-timeout-s; 2 bad usage: options, key file, an application that cannot be executed\n"
    "on some slot). An application that exits with 75 is restarted like a crashed one; any\n"
    "other non-zero code ends the job with it.\n";

// Raises this process's descriptor limit to the hard limit (the coordinator and its connections
// live here) and returns the limit it found, which the application gets back.
std::optional<rlimit> RaiseDescriptorLimit() {
  rlimit original{};
  if (getrlimit(RLIMIT_NOFILE, &original) != 0) return std::nullopt;
  if (original.rlim_cur < original.rlim_max) {
    rlimit raised = original;
    raised.rlim_cur = original.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0)
      RTFT_LOG(kWarn, kLogLaunch) << "cannot raise RLIMIT_NOFILE to " << original.rlim_max << ": "
                                  << std::strerror(errno);
  }
  return original;
}

// Open MPI's mpirun SIGKILLs its processes odls_base_sigkill_timeout seconds (default 1) after
// it forwards a SIGTERM: shorter than the grace plus dp-launch's second, the application never
// gets its grace (docs/launcher.md "Shutdown").
std::optional<std::string> SigkillTimeoutWarning(const LaunchEnv& env,
                                                 const LaunchOptions& options) {
  if (env.kind != LauncherKind::kOpenMpi) return std::nullopt;
  const char* v = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  char* end = nullptr;
  const long timeout = v && *v ? std::strtol(v, &end, 10) : 1;
  const long needed = options.shutdown_grace.count() + 2;
  if (v && *v && (*end != '\0' || timeout < 0)) return std::nullopt;  // not ours to judge
  if (timeout >= needed) return std::nullopt;
  return "mpirun SIGKILLs every dp-launch " + std::to_string(timeout) +
         " s after it forwards a SIGTERM (odls_base_sigkill_timeout), before the application's "
         "--shutdown-grace-s " +
         std::to_string(options.shutdown_grace.count()) +
         " s are over: run mpirun --mca odls_base_sigkill_timeout " + std::to_string(needed) +
         " (or more) for a graceful shutdown\n";
}

// The slot's own GPU (docs/launcher.md, "GPUs"): told to the coordinator, which gives it to the
// rank this slot holds; a spare's comes with its activation.
void SetSlotGpu(const BootstrapResult& boot, const LaunchOptions& options, AgentConfig* config) {
  const GpuCount count = CountGpus(options.gpus_per_node);
  if (count.gpus == 0) return;  // the CPU path: no device is set
  std::vector<std::string> hosts;
  for (const Peer& p : boot.peers) hosts.push_back(p.host);
  const int local = LocalIndex(boot.slot, hosts);
  config->gpus = count.gpus;
  config->device = SlotDevice(local, count.gpus);
  RTFT_LOG(kInfo, kLogLaunch) << "slot " << boot.slot << ": local index " << local << " of "
                              << boot.host << ", " << count.gpus << " GPU(s) (" << count.from
                              << "): device " << config->device;
}

int RunJob(const LaunchOptions& options, const LaunchEnv& env) {
  const JobEndReport report(options.exit_code_file, env.launcher_slot);
  const std::optional<rlimit> app_nofile = RaiseDescriptorLimit();
  // MPI_Init and the bootstrap's collectives have no deadline of their own.
  std::optional<BootstrapWatchdog> watchdog;
  if (env.kind == LauncherKind::kOpenMpi || env.kind == LauncherKind::kMpich)
    watchdog.emplace(options.join_timeout, report);
  auto boot = Bootstrap(env, options);
  watchdog.reset();
  if (!boot.ok()) {
    const int code = ExitCodeFor(boot.status());
    std::cerr << "dp-launch: bootstrap failed: " << boot.status() << "\n";
    if (report.slot() == 0)
      report.Final(code);
    else if (boot.status().message().rfind(kFromSlotZero, 0) != 0)
      report.IfFirst(code);  // this slot's own failure: slot 0 may know nothing of it
    return code;
  }
  SetLogRank(boot->slot);
  if (boot->slot == 0) {
    for (const auto& w : env.warnings) std::cerr << "dp-launch: warning: " << w << "\n";
    if (auto w = SigkillTimeoutWarning(env, options)) std::cerr << "dp-launch: warning: " << *w;
    RTFT_LOG(kInfo, kLogLaunch) << LauncherName(env.kind) << ": " << boot->slots << " slots ("
                                << options.spares << " spares), coordinator at " << boot->endpoint;
  }
  std::unique_ptr<control::Coordinator> coordinator = std::move(boot->coordinator);
  if (coordinator && options.dedicated_coordinator)
    return RunDedicatedCoordinator(std::move(coordinator), options, env, report);
  AgentConfig config;
  config.options = options;
  config.launcher = env.kind;
  config.slot = boot->slot;
  config.slots = boot->slots;
  config.host = boot->host;
  config.peers = boot->peers;
  config.endpoint = boot->endpoint;
  config.keys = boot->keys;
  config.app_nofile = app_nofile;
  config.standby = options.StandbyIn(boot->slots);
  if (coordinator && boot->slot != 0) config.coordinator_endpoint = coordinator->endpoint();
  SetSlotGpu(*boot, options, &config);
  int code;
  bool coordinator_lost;
  std::optional<std::chrono::steady_clock::time_point> gone_by;
  {
    Agent agent(std::move(config));
    code = agent.Run();
    coordinator_lost = agent.coordinator_lost();
    gone_by = agent.gone_by();
  }
  // The primary (slot 0's, or a standby that took over) keeps the coordinator until the job is
  // over, even when its own slot retired; after a signal, only until its own deadline (the other
  // slots' reports may never come).
  if (coordinator && coordinator->is_primary())
    return FinishAsCoordinator(std::move(coordinator), gone_by, code, options, env, report);
  if (coordinator && coordinator->fenced()) return Fenced(boot->slot);
  coordinator.reset();  // a standby that never took over
  // The coordinators are gone: no one else will say how the job ended.
  if (coordinator_lost) code = report.IfFirst(code);
  return code;
}

// Bad usage: exit 2, reported like any other ending (mpirun --enable-recovery would exit 0).
int Usage(const std::string& message, const std::string& exit_code_file) {
  std::cerr << "dp-launch: " << message << "\n";
  const LaunchEnv env = DetectLaunchEnv();
  JobEndReport report(exit_code_file, env.launcher_slot);
  if (report.slot() == 0)
    report.Final(kExitUsage);
  else
    report.IfFirst(kExitUsage);
  return kExitUsage;
}

// The exit-code file when the options could not be resolved: the flag, even when the command
// line as a whole was refused, else the variable.
std::string ExitCodeFileOf(const LaunchFlags& flags, int argc, char** argv) {
  std::string path = flags.exit_code_file;
  const std::string flag = "--exit-code-file";
  for (int i = 1; path.empty() && i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == flag && i + 1 < argc) path = argv[i + 1];
    if (arg.rfind(flag + "=", 0) == 0) path = arg.substr(flag.size() + 1);
  }
  if (path.empty()) {
    const char* env = std::getenv(GetParamInfo(Param::kExitCodeFile).env);
    if (env) path = env;
  }
  return path == "none" ? "" : path;
}

int Main(int argc, char** argv) {
  CLI::App app{std::string(kDescription) + "\n" + LauncherSupportText()};
  app.get_formatter()->column_width(36);
  LaunchFlags flags;
  AddLaunchFlags(&app, &flags);
  std::string new_key_file;
  app.add_option("--new-key-file", new_key_file,
                 "write a new job key file (mode 0600) for srun, then exit");
  app.positionals_at_end();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : Usage("see dp-launch --help", ExitCodeFileOf(flags, argc, argv));
  }
  if (flags.print_config) {
    std::cout << FormatConfig();
    return 0;
  }
  if (!new_key_file.empty()) {
    auto keys = control::GenerateJobKeys();
    Status s = keys.ok() ? control::SaveJobKeys(new_key_file, *keys) : keys.status();
    if (!s.ok()) {
      std::cerr << "dp-launch: " << s << "\n";
      return ExitCodeFor(s);
    }
    return 0;
  }
  auto options = ResolveOptions(flags);
  if (!options.ok()) return Usage(options.status().message(), ExitCodeFileOf(flags, argc, argv));
  if (options->command.empty())
    return Usage("no application given; usage: dp-launch [options] -- APP [ARGS]",
                 options->exit_code_file);
  LogLevel level;
  if (!ParseLogLevel(options->log_level, &level))
    return Usage("unknown --log-level '" + options->log_level + "'", options->exit_code_file);
  SetLogLevel(level);
  InstallAgentSignalHandlers();
  return RunJob(*options, DetectLaunchEnv());
}

}  // namespace
}  // namespace rtft::launch

int main(int argc, char** argv) {
  try {
    return rtft::launch::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dp-launch: " << e.what() << "\n";
    return 1;
  }
}
