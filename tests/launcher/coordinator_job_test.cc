// The job survives the loss of the coordinator's slot (docs/launcher.md "Where the coordinator
// runs"), tested with rtft-train under real `mpirun --enable-recovery dp-launch`, real SIGKILL and
// SIGSTOP, and fault points at named phases of a step: every run that finishes ends with the
// digest of the same run without a failure, on every rank.
#include <signal.h>

#include <gtest/gtest.h>

#include "launcher/train_job.h"

namespace rtft::launch::test {
namespace {

class CoordinatorJobTest : public TrainJobTest {};

// --coordinator-slot dedicated: slot 0 runs only the coordinator; ranks 0..3 are slots 1..4.
TEST_F(CoordinatorJobTest, DedicatedCoordinatorRunsNoApplicationAndEndsWithTheDigest) {
  TrainSpec spec;
  spec.dedicated = true;
  spec.dp_extra = {"--log-level", "info"};
  TrainRun run = Start("dedicated-clean", spec);
  ExpectIdentical(run, 4, "dedicated coordinator, no failure");
  EXPECT_EQ(run.Count("slot 0 runs only the coordinator"), 1u) << run.output;
  EXPECT_EQ(run.Count("slot 0: started"), 0u) << "slot 0 started an application\n" << run.output;
  for (int slot = 1; slot <= 4; ++slot)
    EXPECT_EQ(run.Count("slot " + std::to_string(slot) + ": started"), 1u) << run.output;
}

// Losing the slot that holds rank 0 is an ordinary slot loss: a spare takes the rank.
TEST_F(CoordinatorJobTest, DedicatedCoordinatorLosingAnyOtherSlotIsAnOrdinarySlotLoss) {
  for (const std::string& point : {"protect.update@6", "train.backward@6"}) {
    SCOPED_TRACE(point);
    TrainSpec spec;
    spec.dedicated = true;
    spec.faults = "0:" + point + ":hang";
    spec.during = [](Job& job, const std::string& dir) {
      EXPECT_EQ(LoseFiredSlots(job, dir, 1), std::set<int>{1});
    };
    TrainRun run = Start("dedicated-lost-" + point, spec);
    ExpectIdentical(run, 4, "dedicated coordinator, slot 1 lost at " + point);
    EXPECT_GE(run.recoveries, 3) << run.output;
    EXPECT_NE(run.output.find("role=spare-activated rank=0"), std::string::npos) << run.output;
  }
}

}  // namespace
}  // namespace rtft::launch::test
