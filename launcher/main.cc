// dp-launch: one per slot, under `mpirun --enable-recovery` or `srun --kill-on-bad-exit=0`.
// Bootstraps the job (MPI or Slurm variables), hosts the coordinator on slot 0, then runs the
// slot's agent, which starts and supervises the application.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>

#include "control/keys.h"
#include "core/logging.h"
#include "launcher/agent.h"
#include "launcher/bootstrap.h"
#include "launcher/launch_env.h"
#include "launcher/launch_options.h"

namespace rtft::launch {
namespace {

constexpr int kExitUsage = 2;

const char* kDescription =
    "dp-launch: runs APP under rt-ft's fault tolerance, one dp-launch per slot.\n"
    "  mpirun -np N --enable-recovery dp-launch [options] -- APP [ARGS]\n"
    "  srun --kill-on-bad-exit=0 dp-launch --job-key-file F [options] -- APP [ARGS]\n"
    "Exit codes: the job's (0 when every rank's application exited 0 or checkpoint-and-exit\n"
    "completed; else the first failing application's code; 1 when spares ran out under `fail`\n"
    "or the coordinator was lost; 2 bad usage). An application that exits with 75 is\n"
    "restarted like a crashed one; any other non-zero code ends the job with it.\n";

Status WriteExitCode(const std::string& path, int code) {
  if (path.empty()) return Status::Ok();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << code << "\n";
    if (!out) return Status::IoError("writing " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, path);
  return Status::Ok();
}

int RunJob(const LaunchOptions& options) {
  const LaunchEnv env = DetectLaunchEnv();
  auto boot = Bootstrap(env, options);
  if (!boot.ok()) {
    std::cerr << "dp-launch: bootstrap failed: " << boot.status() << "\n";
    return 1;
  }
  SetLogRank(boot->slot);
  if (boot->slot == 0) {
    for (const auto& w : env.warnings) std::cerr << "dp-launch: warning: " << w << "\n";
    RTFT_LOG(kInfo, kLogLaunch) << LauncherName(env.kind) << ": " << boot->slots << " slots ("
                                << options.spares << " spares), coordinator at " << boot->endpoint;
  }
  std::unique_ptr<control::Coordinator> coordinator = std::move(boot->coordinator);
  AgentConfig config;
  config.options = options;
  config.launcher = env.kind;
  config.slot = boot->slot;
  config.slots = boot->slots;
  config.host = boot->host;
  config.peers = boot->peers;
  config.endpoint = boot->endpoint;
  config.keys = boot->keys;
  int code;
  {
    Agent agent(std::move(config));
    code = agent.Run();
  }
  if (!coordinator) return code;
  // Slot 0 keeps the coordinator until the job is over, even when its own slot retired.
  code = coordinator->WaitJobEnd();
  // Let the last broadcast reach the other agents before the coordinator goes away.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  coordinator.reset();
  if (env.kind == LauncherKind::kSlurm) unlink(SlurmEndpointFile(options.job_key_file).c_str());
  Status s = WriteExitCode(options.exit_code_file, code);
  if (!s.ok()) std::cerr << "dp-launch: " << s << "\n";
  std::cerr << "dp-launch: job exit code " << code << "\n";
  return code;
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
    return rc == 0 ? 0 : kExitUsage;
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
      return 1;
    }
    return 0;
  }
  auto options = ResolveOptions(flags);
  if (!options.ok()) {
    std::cerr << "dp-launch: " << options.status().message() << "\n";
    return kExitUsage;
  }
  if (options->command.empty()) {
    std::cerr << "dp-launch: no application given; usage: dp-launch [options] -- APP [ARGS]\n";
    return kExitUsage;
  }
  LogLevel level;
  if (!ParseLogLevel(options->log_level, &level)) {
    std::cerr << "dp-launch: unknown --log-level '" << options->log_level << "'\n";
    return kExitUsage;
  }
  SetLogLevel(level);
  InstallAgentSignalHandlers();
  return RunJob(*options);
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
