// The hot swap with the model on the GPU: `mpirun --enable-recovery dp-launch -- rtft-train
// --device cuda`, bf16 parameters in device memory and the optimizer's fp32 state resident on
// the GPU (or, with --offload, in pinned host memory), protected per step from device memory
// (docs/protect.md, "Device state"). One rank alone restarts in place from its host-side L1 (over
// Gloo and over a one-rank NCCL communicator); two and three ranks share the one GPU over the
// host-staged Gloo communicator, a slot lost and the spare fed, a process crashed. Every run ends
// with the digest of the same run without the failure. Skips without a GPU.
#include "checkpoint/capture/device_copy.h"
#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kTrain = {"--steps",  "16",   "--hidden",    "256",
                                         "--batch",  "8",    "--log-every", "100",
                                         "--device", "cuda", "--comm",      "gloo"};

#define RTFT_REQUIRE_GPU() \
  if (!CudaDevicePresent()) GTEST_SKIP() << "no CUDA device"

class GpuJobTest : public TrainJobTest {
 protected:
  GpuJobTest() : TrainJobTest(kTrain, 1000) {}
};

TEST_F(GpuJobTest, TheSameJobTwiceEndsWithTheSameDigestAndOffloadComputesTheSameBits) {
  RTFT_REQUIRE_GPU();
  Run a = Start("twice-a", 2, 0, "", 0);
  Run b = Start("twice-b", 2, 0, "", 0);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(a.digests.size(), 2u) << a.output;
  EXPECT_EQ(a.digests, b.digests) << a.output << b.output;
  EXPECT_EQ(a.digests.at(0), a.digests.at(1)) << a.output;
  // The interleaved optimizer's CPU and GPU kernels round every operation alike: wherever a
  // subgroup is updated, the state is the GPU-resident optimizer's, bit for bit.
  Run offload = Start("twice-offload", 2, 0, "", 0, {"--offload"});
  ASSERT_EQ(offload.exit_code, 0) << offload.output;
  ASSERT_EQ(offload.digests.size(), 2u) << offload.output;
  EXPECT_EQ(offload.digests.at(0), a.digests.at(0)) << offload.output;
  // Every subgroup on the CPU (rtft-bench offload-e2e's baseline): the same bits again.
  Run cpu = Start("twice-offload-cpu", 2, 0, "", 0, {"--offload", "--offload-mode", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(cpu.digests.size(), 2u) << cpu.output;
  EXPECT_EQ(cpu.digests.at(0), a.digests.at(0)) << cpu.output;
}

TEST_F(GpuJobTest, OneRankCrashedMidStepRestartsInPlaceFromItsHostSideSnapshot) {
  RTFT_REQUIRE_GPU();
  for (const std::string& comm : {"gloo", "nccl"}) {
    for (const std::string& point : {"train.backward@6", "protect.update@6"}) {
      SCOPED_TRACE(comm + " " + point);
      const std::vector<std::string> extra = {"--comm", comm};
      Run run = Start("one-" + comm + "-" + point, 1, 0, "0:" + point + ":kill", 0, extra);
      ExpectIdentical(run, 1, "crash at " + point, extra);
      EXPECT_NE(run.output.find("role=restarted"), std::string::npos) << run.output;
      EXPECT_NE(run.output.find("source=l1"), std::string::npos) << run.output;
    }
  }
}

TEST_F(GpuJobTest, RanksSharingTheGpuLoseASlotAndTheSpareIsFed) {
  RTFT_REQUIRE_GPU();
  for (const std::string& point : {"protect.capture@6", "train.backward@6", "protect.update@6"}) {
    SCOPED_TRACE(point);
    Run run = Start("slot-" + point, 2, 1, "1:" + point + ":hang", 1);
    ExpectIdentical(run, 2, "slot lost at " + point);
    EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
  }
}

TEST_F(GpuJobTest, ThreeRanksACrashAndALostSlotWithAndWithoutOffload) {
  RTFT_REQUIRE_GPU();
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--offload"}}) {
    const std::string tag = extra.empty() ? "resident" : "offload";
    SCOPED_TRACE(tag);
    Run crash = Start("crash3-" + tag, 3, 1, "2:train.backward@6:kill", 0, extra);
    ExpectIdentical(crash, 3, "a crash (" + tag + ")", extra);
    EXPECT_NE(crash.output.find("role=restarted"), std::string::npos) << crash.output;
    // Not slot 0's: that slot runs the coordinator.
    Run slot = Start("slot3-" + tag, 3, 1, "2:protect.l2.send@6:hang", 1, extra);
    ExpectIdentical(slot, 3, "rank 2's slot lost (" + tag + ")", extra);
    EXPECT_NE(slot.output.find("role=spare-activated rank=2"), std::string::npos) << slot.output;
  }
}

}  // namespace
}  // namespace rtft::launch::test
