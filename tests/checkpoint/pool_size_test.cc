// The default pool (RTFT_CKPT_POOL_BYTES=0): an eighth of the node's memory per local rank,
// whole chunks, between two chunks per flush thread and 64 GiB, where the local rank count
// comes from RTFT_CKPT_LOCAL_RANKS, then the launcher's environment. Resolving the engine's
// options picks it (at creation, never inside Checkpoint()).
#include "checkpoint/pool/pool_size.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "checkpoint/engine.h"
#include "core/params.h"

namespace rtft {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old, had_ = true;
    ::setenv(name, value, 1);
    ReloadParams();
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
    ReloadParams();
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

uint64_t HostBytes() {
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

TEST(PoolSize, AnEighthOfTheNodePerLocalRank) {
  const uint64_t chunk = 64 << 20;
  ScopedEnv one("RTFT_CKPT_LOCAL_RANKS", "1");
  const PoolSizing s1 = DefaultPoolSize(chunk, 4);
  EXPECT_EQ(s1.local_ranks, 1);
  EXPECT_EQ(s1.local_ranks_from, "RTFT_CKPT_LOCAL_RANKS");
  EXPECT_LE(s1.host_bytes, HostBytes());
  EXPECT_EQ(s1.bytes % chunk, 0u);
  EXPECT_GE(s1.bytes, 8 * chunk);  // two chunks per flush thread
  EXPECT_LE(s1.bytes, 64ull << 30);
  if (s1.host_bytes / 8 >= 8 * chunk && s1.host_bytes / 8 <= (64ull << 30))
    EXPECT_GT(s1.bytes, s1.host_bytes / 8 - chunk);

  ScopedEnv four("RTFT_CKPT_LOCAL_RANKS", "4");
  const PoolSizing s4 = DefaultPoolSize(chunk, 4);
  EXPECT_EQ(s4.local_ranks, 4);
  EXPECT_LE(s4.bytes, std::max<uint64_t>(s1.bytes / 4 + chunk, 8 * chunk));
}

TEST(PoolSize, LocalRanksFromTheLauncher) {
  ScopedEnv unset("RTFT_CKPT_LOCAL_RANKS", "0");
  ScopedEnv slurm("SLURM_NTASKS_PER_NODE", "8(x2)");
  const PoolSizing s = DefaultPoolSize(1 << 20, 1);
  EXPECT_EQ(s.local_ranks, 8);
  EXPECT_EQ(s.local_ranks_from, "SLURM_NTASKS_PER_NODE");
}

TEST(PoolSize, TheEngineResolvesTheDefaultAtCreation) {
  ScopedEnv pool("RTFT_CKPT_POOL_BYTES", "0");
  ScopedEnv ranks("RTFT_CKPT_LOCAL_RANKS", "64");  // keeps the pool small on a test machine
  CheckpointOptions o;
  o.dir = "/unused";
  o.chunk_bytes = 1 << 20;
  o.flush_threads = 2;
  auto resolved = ResolveCheckpointOptions(o);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->pool_bytes, DefaultPoolSize(1 << 20, 2).bytes);
  // An explicit size wins.
  ScopedEnv explicit_pool("RTFT_CKPT_POOL_BYTES", "8M");
  EXPECT_EQ(ResolveCheckpointOptions(o)->pool_bytes, 8u << 20);
}

}  // namespace
}  // namespace rtft
