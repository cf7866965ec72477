// The MPI bootstrap. MPI is used for one allgather and one broadcast, then finalized right away:
// every process is alive at that point, so MPI_Finalize cannot wait on a dead peer, and no MPI
// state (progress threads, sockets to the launcher's daemons) is left in a process that later
// forks the application. Under Open MPI 4.1 with --enable-recovery a process that finalized and
// later dies, or exits with any code, leaves the others running (and mpirun exits 0: the job's
// code goes to --exit-code-file). Without --enable-recovery mpirun kills the job when a slot
// dies or exits non-zero, and passes that exit code on. MPICH's Hydra passes exit codes on but
// kills the job when a slot dies by a signal (docs/launcher.md).
#include <mpi.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/logging.h"
#include "launcher/bootstrap.h"

namespace rtft::launch {
namespace {

constexpr int kHostBytes = 256;

#if defined(MPICH_VERSION)
constexpr const char* kBuiltWith = "MPICH";
constexpr const char* kRebuild = "-DRTFT_MPI=openmpi";
#elif defined(OPEN_MPI)
constexpr const char* kBuiltWith = "Open MPI";
constexpr const char* kRebuild = "-DRTFT_MPI=mpich";
#else
constexpr const char* kBuiltWith = "an unknown MPI";
constexpr const char* kRebuild = "-DRTFT_MPI=openmpi or mpich";
#endif

struct PeerRecord {
  char host[kHostBytes];
  int32_t pid;
  int32_t app_errno;  // 0: this slot can execute the application
};

Status MpiError(int rc, const char* what) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Unavailable(std::string(what) + ": " + text);
}

std::string ErrorMessage(const Status& s) {
  return "error " + std::to_string(static_cast<int>(s.code())) + " " + s.message();
}

// Slot 0's message to all: "ok <endpoint> [keys]" or "error <status code> <text>".
std::string RootMessage(const LaunchOptions& options, const std::vector<PeerRecord>& all,
                        BootstrapResult* r) {
  for (size_t s = 0; s < all.size(); ++s) {
    // A dedicated coordinator's slot runs no application.
    if (all[s].app_errno == 0 || (s == 0 && options.dedicated_coordinator)) continue;
    return ErrorMessage(
        Status::FromErrno(all[s].app_errno, "slot " + std::to_string(s) + " (" + r->peers[s].host +
                                                "): the application '" + options.command[0] +
                                                "' cannot be executed there"));
  }
  control::JobKeys keys;
  if (!options.job_key_file.empty()) {
    auto loaded = control::LoadJobKeys(options.job_key_file);
    if (!loaded.ok()) return ErrorMessage(loaded.status().Annotate("--job-key-file"));
    keys = *loaded;
  } else {
    auto generated = control::GenerateJobKeys();
    if (!generated.ok()) return ErrorMessage(generated.status());
    keys = *generated;
  }
  auto coordinator = StartCoordinator(options, keys, r->slots);
  if (!coordinator.ok())
    return ErrorMessage(coordinator.status().Annotate("starting the coordinator"));
  r->coordinator = std::move(*coordinator);
  r->keys = keys;
  r->endpoint = r->coordinator->endpoint();
  // With a key file every slot reads its own copy (a slot with other keys cannot join).
  return "ok " + r->endpoint + (options.job_key_file.empty() ? "\n" + EncodeJobKeys(keys) : "");
}

Status Exchange(const LaunchOptions& options, BootstrapResult* r) {
  PeerRecord mine{};
  std::strncpy(mine.host, r->host.c_str(), kHostBytes - 1);
  mine.pid = static_cast<int32_t>(getpid());
  std::string path;
  mine.app_errno = options.command.empty() ? ENOENT : FindExecutable(options.command[0], &path);
  std::vector<PeerRecord> all(r->slots);
  int rc = MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE,
                         MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allgather");
  for (const auto& p : all)
    r->peers.push_back({std::string(p.host, strnlen(p.host, kHostBytes)), p.pid});

  std::string message;
  if (r->slot == 0) message = RootMessage(options, all, r);
  int len = static_cast<int>(message.size());
  rc = MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Bcast");
  message.resize(len);
  rc = MPI_Bcast(message.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Bcast");

  if (message.rfind("error ", 0) == 0) {
    char* end = nullptr;
    const long code = std::strtol(message.c_str() + 6, &end, 10);
    const bool known = end != message.c_str() + 6 && *end == ' ' && code > 0 &&
                       code <= static_cast<long>(kLastStatusCode);
    return Status(known ? static_cast<StatusCode>(code) : StatusCode::kInternal,
                  kFromSlotZero + std::string(known ? end + 1 : message.c_str() + 6));
  }
  if (message.rfind("ok ", 0) != 0) return Status::Internal("bad bootstrap message");
  if (r->slot == 0) return Status::Ok();
  const size_t nl = message.find('\n');
  r->endpoint = message.substr(3, nl == std::string::npos ? std::string::npos : nl - 3);
  if (nl != std::string::npos) {
    RTFT_ASSIGN_OR_RETURN(r->keys, control::DecodeJobKeys(message.substr(nl + 1)));
  } else {
    auto loaded = control::LoadJobKeys(options.job_key_file);
    if (!loaded.ok()) return loaded.status().Annotate("--job-key-file");
    r->keys = *loaded;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<BootstrapResult> BootstrapMpi(const LaunchEnv& env, const LaunchOptions& options) {
  int rc = MPI_Init(nullptr, nullptr);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init");
  // Errors come back as codes instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  BootstrapResult r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r.slot);
  MPI_Comm_size(MPI_COMM_WORLD, &r.slots);
  // A dp-launch started by another MPI's launcher cannot reach it and runs as a singleton: every
  // process would become a one-slot job of its own.
  if (env.launcher_slots > 0 && env.launcher_slots != r.slots) {
    MPI_Finalize();
    return Status::FailedPrecondition(
        std::string("this dp-launch is built against ") + kBuiltWith + " but was started by " +
        LauncherName(env.kind) + " (" + std::to_string(env.launcher_slots) + " slots, MPI sees " +
        std::to_string(r.slots) + "); use a dp-launch built with the launcher's MPI (cmake " +
        kRebuild + ")");
  }
  char host[kHostBytes] = {};
  gethostname(host, sizeof(host) - 1);
  r.host = host;
  Status s = Exchange(options, &r);
  // Every slot took part in the broadcast, so every slot is alive: finalize now.
  MPI_Finalize();
  if (!s.ok()) return s;
  return r;
}

}  // namespace rtft::launch
