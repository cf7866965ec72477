#include "checkpoint/pool/pool_size.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/host_env.h"
#include "core/params.h"

namespace rtft {
namespace {

constexpr uint64_t kMaxPool = 64ull << 30;
constexpr int kMemoryShare = 8;  // the pool's part of a rank's memory: one eighth

uint64_t HostMemory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  uint64_t bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
  // A container's limit, where there is one (cgroup v2; "max" means none).
  std::ifstream limit("/sys/fs/cgroup/memory.max");
  uint64_t cgroup = 0;
  if (limit >> cgroup && cgroup > 0) bytes = bytes ? std::min(bytes, cgroup) : cgroup;
  return bytes;
}

// Every GPU of the node, whatever CUDA_VISIBLE_DEVICES hides from this process.
int NodeGpus() {
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

void LocalRanks(PoolSizing* s) {
  auto set = StatusOr<int64_t>(ParamInt(Param::kCkptLocalRanks));
  if (set.ok() && *set > 0) {
    s->local_ranks = static_cast<int>(*set);
    s->local_ranks_from = "RTFT_CKPT_LOCAL_RANKS";
    return;
  }
  // What the launchers say; dp-launch hides the MPI ones from the application.
  if (const LauncherCount n = LauncherLocalProcesses(); n.count > 0) {
    s->local_ranks = n.count;
    s->local_ranks_from = n.from;
    return;
  }
  // One rank per GPU is how training jobs run.
  if (const int n = NodeGpus()) {
    s->local_ranks = n;
    s->local_ranks_from = "the node's GPUs";
    return;
  }
  s->local_ranks = 1;
  s->local_ranks_from = "no launcher setting, no GPU";
}

}  // namespace

PoolSizing DefaultPoolSize(uint64_t chunk_bytes, int flush_threads) {
  PoolSizing s;
  s.host_bytes = HostMemory();
  LocalRanks(&s);
  const uint64_t floor = 2 * chunk_bytes * static_cast<uint64_t>(std::max(flush_threads, 1));
  const uint64_t share = s.host_bytes / static_cast<uint64_t>(s.local_ranks) / kMemoryShare;
  s.bytes = std::clamp(share / chunk_bytes * chunk_bytes, floor, std::max(floor, kMaxPool));
  return s;
}

}  // namespace rtft
