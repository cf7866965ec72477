// A spare admitted healthy, end to end (docs/launcher.md, "Health check"): `mpirun
// --enable-recovery dp-launch --spares 2 -- rtft-train` where the first spare's health check
// fails (`3/health.check:exit=1`, a named fault point in rtft-health). Its slot leaves the pool
// with the reason in the log; a lost slot then goes to the second spare, and the run ends with the
// digest of the run without the failures, bit for bit. Without a GPU the check covers the host
// only (rtft-health says so); on the GPU machine it runs the device check too. A slot that holds
// a rank and fails its (passive) check sends the rank to the spare.
#include <fstream>
#include <sstream>

#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kTrain = {"--steps", "300", "--hidden",    "192",
                                         "--batch", "8",   "--log-every", "1000"};

class HealthJobTest : public TrainJobTest {
 protected:
  HealthJobTest() : TrainJobTest(kTrain, 1000) {}

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

TEST_F(HealthJobTest, ASpareThatFailsItsCheckIsPassedOver) {
  env_["RTFT_FAULT"] = "3/health.check:exit=1";
  const std::string dir = root_ + "/passed-over";
  // Slot 1 is lost (its rank hung at step 100, its agent SIGKILLed) only once the first spare
  // has left the pool: the rank must go to the second. (The health check's fault line names
  // slot 3 too: the slot to lose is named, not taken from the log.)
  auto unhealthy = [&] {
    return Read(dir + "/mpirun.out").find("health check failed") != std::string::npos;
  };
  Run run = Start("passed-over", 3, 2, "1:protect.update@100:hang", 0, {}, {}, nullptr,
                  [&](Job& job) { LoseSlotAtItsFault(job, dir, 1, unhealthy); });
  env_.erase("RTFT_FAULT");
  ExpectIdentical(run, 3, "first spare unhealthy");
  EXPECT_NE(run.output.find("slot 3 (device "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("): health check failed: exit 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("slot 3 (spare): health check failed, slot retired"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("rank 1 -> spare slot 4"), std::string::npos) << run.output;
}

// A slot that holds a rank is checked too, passively (`--passive`: NVML's view and the host, no
// CUDA context beside the rank's), first one period after it took the rank. Slot 1's check fails
// (`1/health.check:exit=1`, every period 1 s here) while its rank stands at step 50's update: the
// slot is retired as with a device error, its application with it, the spare takes rank 1, and
// the run ends bit for bit. No slot is SIGKILLed by the test.
TEST_F(HealthJobTest, ARankWhoseSlotFailsItsCheckGoesToASpare) {
  env_["RTFT_FAULT"] = "1/health.check:exit=1";
  Run run = Start("active", 3, 1, "1:protect.update@50:hang", 0, {}, {"--health-period-s", "1"});
  env_.erase("RTFT_FAULT");
  ExpectIdentical(run, 3, "an active slot unhealthy");
  EXPECT_NE(run.output.find("slot 1 (device -1, rank 1): health check failed: exit 1"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("its rank goes to a spare (a device error)"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 1 (rank 1): device error, slot retired; rank 1 -> spare slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
