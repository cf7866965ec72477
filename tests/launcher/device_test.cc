// dp-launch gives each slot its GPU (docs/launcher.md, "GPUs") under real mpirun
// --enable-recovery, on a machine that needs none: the slots of a node get their local index
// modulo the node's GPU count as RTFT_DEVICE and rtft::RuntimeInfo::device, a warm spare gets no
// device until its activation, the device travels with the rank to the spare that takes it, and
// a restarted application keeps its slot's.
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

class DeviceTest : public JobFixture {
 protected:
  int Finish() {
    auto rc = WaitLauncher(seconds(90));
    if (rc) EXPECT_EQ(*rc, 0) << job_->Dump();
    return job_->JobExitCode();
  }
  // The RTFT_DEVICE the n-th process started on `slot` found ("-": unset).
  std::string EnvDevice(int slot, size_t n = 0) {
    auto launched = LinesOf(dir_, slot, "launched");
    return n < launched.size() ? launched[n].Get("env_device") : "(not launched)";
  }
  // dp-launch alone (no launcher: one slot) with `args`; its exit status and stderr.
  int RunAlone(const std::string& args, std::string* err) {
    const std::string path = dir_ + "/alone.err";
    const std::string cmd =
        "env -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK " + args + " 2> " +
        path;
    const int rc = std::system(cmd.c_str());
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    *err = text.str();
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
};

TEST_F(DeviceTest, SlotsGetTheirGpuByLocalIndexAndTheSpareTakesTheLostRanksGpu) {
  JobSpec spec = BaseSpec(6, 2, /*steps=*/60);
  spec.dp_args.insert(spec.dp_args.end(), {"--gpus-per-node", "2"});
  // The job may not end before the lost slot (epoch 2) and the crash (epoch 3) were answered.
  spec.env["RTFT_TEST_WAIT_EPOCH"] = "3";
  spec.env["RTFT_DEVICE"] = "7";  // dp-launch's mapping replaces a value set by hand
  job_->Start(spec);
  WaitStep(3, 2);
  // One node: local index = slot; devices 0, 1, 0, 1 for the four ranks.
  for (int slot = 0; slot < 4; ++slot) {
    EXPECT_EQ(EnvDevice(slot), std::to_string(slot % 2)) << slot << "\n" << job_->Dump();
    auto starts = Starts(slot);
    ASSERT_EQ(starts.size(), 1u) << job_->Dump();
    EXPECT_EQ(starts[0].Int("device"), slot % 2) << slot;
  }
  // The spares run (warm) without any device.
  pid_t spare_app, spare_agent;
  for (int slot = 4; slot < 6; ++slot) {
    ASSERT_TRUE(
        WaitFor([&] { return job_->FindSpare(slot, &spare_app, &spare_agent); }, seconds(30)))
        << job_->Dump();
    EXPECT_EQ(EnvDevice(slot), "-") << slot << "\n" << job_->Dump();
    EXPECT_TRUE(Starts(slot).empty()) << job_->Dump();
  }
  // Slot 1 (device 1) lost with its dp-launch: the first spare, slot 4, whose own index maps to
  // device 0, takes rank 1 and its GPU.
  pid_t app, agent;
  int slot = -1;
  ASSERT_TRUE(job_->FindRank(1, &app, &agent, &slot));
  ASSERT_EQ(slot, 1);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_TRUE(kill(app, SIGKILL) == 0 || errno == ESRCH) << std::strerror(errno);
  ASSERT_TRUE(WaitFor([&] { return Starts(4).size() == 1; }, seconds(30))) << job_->Dump();
  auto activated = Starts(4)[0];
  EXPECT_EQ(activated.Get("role"), "spare-activated");
  EXPECT_EQ(activated.Int("rank"), 1);
  EXPECT_EQ(activated.Int("device"), 1) << job_->Dump();
  WaitStep(1, job_->LastStep(1) + 1);
  // Its application crashes: restarted on slot 4, it keeps the rank's device, in its
  // environment too.
  Command(1, "crash");
  ASSERT_TRUE(WaitFor([&] { return Starts(4).size() == 2; }, seconds(30))) << job_->Dump();
  auto restarted = Starts(4)[1];
  EXPECT_EQ(restarted.Get("role"), "restarted");
  EXPECT_EQ(restarted.Int("rank"), 1);
  EXPECT_EQ(restarted.Int("device"), 1) << job_->Dump();
  EXPECT_EQ(EnvDevice(4, 1), "1") << job_->Dump();
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  EXPECT_TRUE(Starts(5).empty()) << job_->Dump();
  // The others kept theirs.
  for (int s : {0, 2, 3}) EXPECT_EQ(Starts(s).size(), 1u) << job_->Dump();
}

TEST_F(DeviceTest, WithoutTheFlagCudaVisibleDevicesGivesTheCount) {
  JobSpec spec = BaseSpec(4, 1, /*steps=*/5);
  spec.env["CUDA_VISIBLE_DEVICES"] = "3,5,7";  // three GPUs, ordinals 0..2 to CUDA
  spec.dp_args.insert(spec.dp_args.end(), {"--log-level", "info"});  // the slots' GPU lines
  job_->Start(spec);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(EnvDevice(slot), std::to_string(slot)) << job_->Dump();
    ASSERT_EQ(Starts(slot).size(), 1u) << job_->Dump();
    EXPECT_EQ(Starts(slot)[0].Int("device"), slot);
  }
  EXPECT_EQ(EnvDevice(3), "-") << job_->Dump();
  // dp-launch left CUDA_VISIBLE_DEVICES as it was (a spare must be able to take any GPU).
  EXPECT_NE(job_->Output().find("3 GPU(s) (CUDA_VISIBLE_DEVICES)"), std::string::npos)
      << job_->Output();
}

TEST_F(DeviceTest, WithoutGpusNoDeviceIsSet) {
  JobSpec spec = BaseSpec(3, 1, /*steps=*/5);
  spec.env["CUDA_VISIBLE_DEVICES"] = "-1";  // CUDA's way to hide every GPU
  spec.dp_args.insert(spec.dp_args.end(), {"--log-level", "info"});
  job_->Start(spec);
  EXPECT_EQ(Finish(), 0) << job_->Dump();
  for (int slot = 0; slot < 3; ++slot) EXPECT_EQ(EnvDevice(slot), "-") << job_->Dump();
  for (int slot = 0; slot < 2; ++slot) {
    ASSERT_EQ(Starts(slot).size(), 1u) << job_->Dump();
    EXPECT_EQ(Starts(slot)[0].Int("device"), 0);  // the runtime's default, as before
  }
  EXPECT_EQ(job_->Output().find("GPU(s)"), std::string::npos) << job_->Output();
}

TEST_F(DeviceTest, GpusPerNodeMustBeACountOfOneOrMore) {
  const std::string dp = std::string(RTFT_DP_LAUNCH) + " --exit-code-file " + dir_ + "/code ";
  for (const char* bad : {"0", "-1", "x", "2x", "1025", "99999999999"}) {
    std::string err;
    EXPECT_EQ(RunAlone(dp + "--gpus-per-node " + bad + " -- /bin/true", &err), 2) << bad;
    EXPECT_NE(err.find("--gpus-per-node"), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("1 to 1024, or auto"), std::string::npos) << bad << ": " << err;
  }
  std::string err;
  EXPECT_EQ(RunAlone("RTFT_GPUS_PER_NODE=0 " + dp + "-- /bin/true", &err), 2);
  EXPECT_NE(err.find("--gpus-per-node '0'"), std::string::npos) << err;
  EXPECT_EQ(RunAlone(dp + "--gpus-per-node 1024 -- /bin/true", &err), 0) << err;
  EXPECT_EQ(RunAlone(dp + "--gpus-per-node auto -- /bin/true", &err), 0) << err;
}

}  // namespace
}  // namespace rtft::launch::test
