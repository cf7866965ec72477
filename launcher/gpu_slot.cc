#include "launcher/gpu_slot.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "control/wire/types.h"
#include "launcher/launch_env.h"

namespace rtft::launch {
namespace {

// A non-negative decimal below `limit`, all of `text`; -1 otherwise.
long Decimal(const std::string& text, long limit) {
  if (text.empty() || text.size() > 9) return -1;
  for (char c : text)
    if (c < '0' || c > '9') return -1;
  const long v = std::strtol(text.c_str(), nullptr, 10);
  return v < limit ? v : -1;
}

const char* Env(const char* name) { return LauncherEnv(name); }

}  // namespace

StatusOr<int> ParseGpusPerNode(const std::string& text) {
  if (text == "auto") return 0;
  const long n = Decimal(text, 1L << 30);
  if (n < 1 || n > control::kMaxGpusPerNode)
    return Status::InvalidArgument(
        "--gpus-per-node '" + text + "': give the GPUs of each node, 1 to " +
        std::to_string(control::kMaxGpusPerNode) + ", or auto (count them; no GPU: no device)");
  return static_cast<int>(n);
}

int CountVisibleDevices(const std::string& value) {
  int n = 0;
  size_t at = 0;
  while (at <= value.size() && n < control::kMaxGpusPerNode) {
    const size_t end = std::min(value.find(',', at), value.size());
    std::string item = value.substr(at, end - at);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    const bool uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
    if (!uuid && Decimal(item, 1L << 30) < 0) break;
    ++n;
    at = end + 1;
  }
  return n;
}

GpuCount CountGpus(int gpus_per_node, const std::string& proc_dir) {
  if (gpus_per_node > 0) return {gpus_per_node, "--gpus-per-node"};
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"))
    return {CountVisibleDevices(visible), "CUDA_VISIBLE_DEVICES"};
  GpuCount c{0, proc_dir};
  DIR* dir = opendir(proc_dir.c_str());
  if (dir == nullptr) return c;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.' && c.gpus < control::kMaxGpusPerNode) ++c.gpus;
  }
  closedir(dir);
  return c;
}

int LocalIndex(int slot, const std::vector<std::string>& hosts) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const long v = Env(name) ? Decimal(Env(name), control::kMaxSlots) : -1;
    if (v >= 0) return static_cast<int>(v);
  }
  if (slot < 0 || static_cast<size_t>(slot) >= hosts.size()) return 0;
  int index = 0;
  for (int s = 0; s < slot; ++s) index += hosts[s] == hosts[slot] ? 1 : 0;
  return index;
}

}  // namespace rtft::launch
