#include "launcher/coordinator_host.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/logging.h"
#include "launcher/agent.h"
#include "launcher/bootstrap.h"

namespace rtft::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// What is left until `deadline` less `margin`, never negative.
milliseconds Left(Clock::time_point deadline, milliseconds margin) {
  return std::max(milliseconds(0), duration_cast<milliseconds>(deadline - margin - Clock::now()));
}

}  // namespace

int FinishAsCoordinator(std::unique_ptr<control::Coordinator> coordinator,
                        std::optional<Clock::time_point> gone_by, int fallback,
                        const LaunchOptions& options, const LaunchEnv& env,
                        const JobEndReport& report) {
  int code = fallback;
  milliseconds linger(200);
  if (!gone_by) {
    code = coordinator->WaitJobEnd();
  } else {
    code = coordinator->WaitJobEndFor(Left(*gone_by, milliseconds(300))).value_or(code);
    linger = std::min(linger, Left(*gone_by, milliseconds(150)));
  }
  if (coordinator->fenced()) return Fenced(report.slot());
  // Let the last broadcast reach the other agents before the coordinator goes away.
  std::this_thread::sleep_for(linger);
  coordinator.reset();
  if (env.kind == LauncherKind::kSlurm) unlink(SlurmEndpointFile(options.job_key_file).c_str());
  report.Final(code);
  return code;
}

int Fenced(int slot) {
  std::fprintf(stderr,
               "dp-launch: slot %d: a newer primary coordinator took over from this one; the slot "
               "ends and leaves the job's exit code to it\n",
               slot);
  return kExitJobFailed;
}

int RunDedicatedCoordinator(std::unique_ptr<control::Coordinator> coordinator,
                            const LaunchOptions& options, const LaunchEnv& env,
                            const JobEndReport& report) {
  RTFT_LOG(kInfo, kLogLaunch) << "slot 0 runs only the coordinator (--coordinator-slot dedicated)";
  while (true) {
    if (auto code = coordinator->WaitJobEndFor(milliseconds(50)))
      return FinishAsCoordinator(std::move(coordinator), std::nullopt, *code, options, env, report);
    if (int sig = AgentPendingSignal()) {
      RTFT_LOG(kInfo, kLogLaunch) << "slot 0 (coordinator only): signal " << sig;
      const auto gone_by = Clock::now() + options.shutdown_grace + std::chrono::seconds(1);
      return FinishAsCoordinator(std::move(coordinator), gone_by, 128 + sig, options, env, report);
    }
  }
}

}  // namespace rtft::launch
