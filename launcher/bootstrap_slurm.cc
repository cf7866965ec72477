// The srun bootstrap, without MPI: SLURM_PROCID is the slot and SLURM_NTASKS the slot count.
// The job keys come from --job-key-file (nothing could hand out generated ones), and slot 0
// publishes the coordinator's endpoint in a file next to it, named after the job and step,
// which the other slots wait for. So the key file's directory must be shared by the nodes.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "launcher/bootstrap.h"
#include "launcher/launch_env.h"

namespace rtft::launch {
namespace {

StatusOr<int> EnvInt(const char* name) { return LauncherEnvInt(name); }

Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "creating " + tmp);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::FromErrno(ok ? errno : err, "writing " + path);
  }
  return Status::Ok();
}

}  // namespace

std::string SlurmEndpointFile(const std::string& key_file) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  return key_file + ".endpoint-" + (job ? job : "0") + "." + (step ? step : "0");
}

StatusOr<BootstrapResult> BootstrapSlurm(const LaunchOptions& options) {
  if (options.job_key_file.empty())
    return Status::InvalidArgument(
        "under srun, dp-launch needs --job-key-file (or RTFT_JOB_KEY_FILE): a file with the "
        "job's keys, mode 0600, on a path every node can read; without MPI there is no way to "
        "hand out generated keys. Create one with: dp-launch --new-key-file PATH");
  BootstrapResult r;
  RTFT_ASSIGN_OR_RETURN(r.slot, EnvInt("SLURM_PROCID"));
  RTFT_ASSIGN_OR_RETURN(r.slots, EnvInt("SLURM_NTASKS"));
  if (r.slot >= r.slots) return Status::InvalidArgument("SLURM_PROCID >= SLURM_NTASKS");
  // A dedicated coordinator's slot runs no application.
  if (r.slot != 0 || !options.dedicated_coordinator)
    RTFT_RETURN_IF_ERROR(CheckApplication(options));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  r.host = host;
  auto keys = control::LoadJobKeys(options.job_key_file);
  if (!keys.ok()) return keys.status().Annotate("--job-key-file");
  r.keys = *keys;
  const std::string file = SlurmEndpointFile(options.job_key_file);
  if (r.slot == 0) {
    RTFT_ASSIGN_OR_RETURN(r.coordinator, StartCoordinator(options, r.keys, r.slots));
    r.endpoint = r.coordinator->endpoint();
    RTFT_RETURN_IF_ERROR(WriteAtomically(file, r.endpoint + "\n"));
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + options.join_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    if (in && std::getline(in, r.endpoint) && !r.endpoint.empty()) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::DeadlineExceeded("no coordinator endpoint in " + file + " after " +
                                  std::to_string(options.join_timeout.count()) +
                                  " s: is slot 0 running, and is the key file's directory "
                                  "shared by every node?");
}

}  // namespace rtft::launch
