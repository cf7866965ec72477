// The slot's GPU (launcher/gpu_slot.h): the flag's checks, CUDA_VISIBLE_DEVICES counted as CUDA
// counts it, the driver's list, and the slot's index on its node.
#include "launcher/gpu_slot.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace rtft::launch {
namespace {

// Sets (or, with nullptr, unsets) a variable for one test and puts it back after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(GpuSlotTest, GpusPerNodeIsAutoOrACountOfOneOrMore) {
  EXPECT_EQ(*ParseGpusPerNode("auto"), 0);
  EXPECT_EQ(*ParseGpusPerNode("1"), 1);
  EXPECT_EQ(*ParseGpusPerNode("8"), 8);
  EXPECT_EQ(*ParseGpusPerNode("1024"), 1024);
  for (const char* bad : {"0", "-1", "+2", " 2", "2 ", "0x4", "x", "", "1025", "4294967297",
                          "99999999999999999999"}) {
    auto n = ParseGpusPerNode(bad);
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_NE(n.status().message().find("1 to 1024, or auto"), std::string::npos);
  }
}

TEST(GpuSlotTest, VisibleDevicesAreCountedUpToTheFirstInvalidEntry) {
  EXPECT_EQ(CountVisibleDevices(""), 0);
  EXPECT_EQ(CountVisibleDevices("-1"), 0);
  EXPECT_EQ(CountVisibleDevices("NoDevFiles"), 0);  // Slurm's value without GPUs
  EXPECT_EQ(CountVisibleDevices("0"), 1);
  EXPECT_EQ(CountVisibleDevices("3,5,7"), 3);
  EXPECT_EQ(CountVisibleDevices("0, 1"), 2);
  EXPECT_EQ(CountVisibleDevices("0,-1,2"), 1);  // CUDA stops at -1
  EXPECT_EQ(CountVisibleDevices("GPU-8f3e2d1c-aaaa,MIG-1234,2"), 3);
  EXPECT_EQ(CountVisibleDevices("1,x,2"), 1);
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "0,";
  EXPECT_EQ(CountVisibleDevices(many), 1024);  // bounded
}

TEST(GpuSlotTest, TheFlagWinsThenCudaVisibleDevicesThenTheDriversList) {
  char tmpl[] = "/tmp/rtft-gpus-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (const char* gpu : {"/0000:19:00.0", "/0000:3b:00.0", "/0000:4c:00.0"})
    ASSERT_EQ(mkdir((dir + gpu).c_str(), 0700), 0);
  {
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,1");
    EXPECT_EQ(CountGpus(4, dir).gpus, 4);
    EXPECT_EQ(CountGpus(4, dir).from, "--gpus-per-node");
    EXPECT_EQ(CountGpus(0, dir).gpus, 2);
    EXPECT_EQ(CountGpus(0, dir).from, "CUDA_VISIBLE_DEVICES");
  }
  {
    ScopedEnv hidden("CUDA_VISIBLE_DEVICES", "");
    EXPECT_EQ(CountGpus(0, dir).gpus, 0);  // set but empty: CUDA sees none
  }
  {
    ScopedEnv unset("CUDA_VISIBLE_DEVICES", nullptr);
    EXPECT_EQ(CountGpus(0, dir).gpus, 3);
    EXPECT_EQ(CountGpus(0, dir + "/none").gpus, 0);
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(GpuSlotTest, LocalIndexFromTheLauncherElseFromTheHosts) {
  ScopedEnv a("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), b("SLURM_LOCALID", nullptr),
      c("MPI_LOCALRANKID", nullptr);
  const std::vector<std::string> hosts = {"n1", "n1", "n2", "n1", "n2"};
  EXPECT_EQ(LocalIndex(0, hosts), 0);
  EXPECT_EQ(LocalIndex(3, hosts), 2);
  EXPECT_EQ(LocalIndex(4, hosts), 1);
  EXPECT_EQ(LocalIndex(7, hosts), 0);  // not in the list (srun: no allgather)
  EXPECT_EQ(LocalIndex(2, {}), 0);
  {
    ScopedEnv slurm("SLURM_LOCALID", "5");
    EXPECT_EQ(LocalIndex(0, hosts), 5);
    ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    EXPECT_EQ(LocalIndex(0, hosts), 3);
  }
  {
    ScopedEnv garbage("SLURM_LOCALID", "-4");  // hostile: ignored
    EXPECT_EQ(LocalIndex(3, hosts), 2);
    ScopedEnv mpich("MPI_LOCALRANKID", "1");
    EXPECT_EQ(LocalIndex(3, hosts), 1);
  }
  EXPECT_EQ(SlotDevice(5, 2), 1);
  EXPECT_EQ(SlotDevice(4, 2), 0);
  EXPECT_EQ(SlotDevice(3, 0), -1);
}

}  // namespace
}  // namespace rtft::launch
