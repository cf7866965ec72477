#include "core/host_env.h"

#include <cstdlib>

namespace rtft {
namespace {

// A positive count ("8", or Slurm's "8(x2)"), else 0.
int Count(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  const long n = std::strtol(v, nullptr, 10);
  return n > 0 && n < (1 << 24) ? static_cast<int>(n) : 0;
}

LauncherCount FirstCount(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const int n = Count(name)) return {n, name};
  return {};
}

}  // namespace

std::string TempDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

LauncherCount LauncherProcesses() {
  return FirstCount({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"});
}

LauncherCount LauncherLocalProcesses() {
  return FirstCount({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"});
}

std::string NcclSetting(const std::string& name) {
  if (name.rfind("NCCL_", 0) != 0) return std::string();
  const char* v = std::getenv(name.c_str());
  return v ? v : "";
}

}  // namespace rtft
