// Shutting a job down by signal, under real mpirun --enable-recovery: every dp-launch ends
// within --shutdown-grace-s plus one second, hung application or not, and mpirun's own SIGKILL
// timer (odls_base_sigkill_timeout) is warned about and, when set, leaves the application its
// grace (docs/launcher.md "Shutdown").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class ShutdownTest : public JobFixture {
 protected:
  // Ranks that run until told otherwise.
  JobSpec Spec(int slots, int spares, std::vector<std::string> extra = {}) {
    JobSpec spec = BaseSpec(slots, spares, /*steps=*/1000000);
    spec.dp_args.insert(spec.dp_args.end(), extra.begin(), extra.end());
    return spec;
  }
};

// SIGTERM to every dp-launch while both ranks' applications hang (they ignore SIGTERM): each is
// SIGKILLed at the grace, and no dp-launch then waits on a coordinator that is already gone.
TEST_F(ShutdownTest, SigtermToEveryDpLaunchEndsWithinTheGracePlusOneSecond) {
  constexpr int kGraceS = 2;
  job_->Start(Spec(3, 1, {"--shutdown-grace-s", std::to_string(kGraceS)}));
  WaitStep(0, 2);
  WaitStep(1, 2);
  Command(0, "hang");
  Command(1, "hang");
  ASSERT_TRUE(WaitFor(
      [&] { return !LinesOf(dir_, 0, "hang").empty() && !LinesOf(dir_, 1, "hang").empty(); },
      seconds(30)))
      << job_->Dump();
  std::vector<pid_t> agents;
  for (int slot = 0; slot < 3; ++slot) agents.push_back(job_->AgentOf(slot));
  for (pid_t a : agents) ASSERT_GT(a, 0);
  const auto start = std::chrono::steady_clock::now();
  for (pid_t a : agents) ASSERT_EQ(kill(a, SIGTERM), 0);
  std::vector<long long> gone_ms(agents.size(), -1);
  ASSERT_TRUE(WaitFor(
      [&] {
        bool all = true;
        for (size_t i = 0; i < agents.size(); ++i) {
          if (gone_ms[i] >= 0) continue;
          if (Alive(agents[i])) {
            all = false;
          } else {
            gone_ms[i] =
                std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start)
                    .count();
          }
        }
        return all;
      },
      seconds(20)))
      << job_->Dump();
  for (size_t i = 0; i < agents.size(); ++i)
    std::printf("slot %zu's dp-launch gone after %lld ms\n", i, gone_ms[i]);
  const auto took =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  std::printf("every dp-launch gone %lld ms after SIGTERM (grace %d s)\n",
              static_cast<long long>(took.count()), kGraceS);
  EXPECT_LE(took.count(), kGraceS * 1000 + 1000) << "shutdown took " << took.count() << " ms\n"
                                                 << job_->Dump();
  auto rc = WaitLauncher();
  EXPECT_EQ(rc.value_or(-1), 0);
  EXPECT_GT(job_->JobExitCode(), 0) << job_->Dump();
}

// Open MPI's mpirun SIGKILLs its processes odls_base_sigkill_timeout (1 s by default) after it
// forwards SIGTERM: dp-launch warns when that is shorter than the grace it needs.
TEST_F(ShutdownTest, WarnsWhenMpirunWouldKillBeforeTheGrace) {
  JobSpec spec = BaseSpec(2, 0, /*steps=*/3);
  spec.dp_args.insert(spec.dp_args.end(), {"--shutdown-grace-s", "5"});
  job_->Start(spec);
  ASSERT_TRUE(WaitLauncher().has_value());
  EXPECT_NE(job_->Output().find("odls_base_sigkill_timeout"), std::string::npos) << job_->Output();
}

// With the setting the batch script passes, SIGTERM to mpirun gives the application its grace:
// here it takes 1.8 s to exit (1 s is all mpirun allows by default). mpirun itself returns only
// about twice the setting after the SIGTERM.
TEST_F(ShutdownTest, SigtermToMpirunLeavesTheApplicationItsGrace) {
  JobSpec spec = Spec(2, 0, {"--shutdown-grace-s", "2"});
  spec.launcher_args = {"--mca", "odls_base_sigkill_timeout", "4"};
  spec.env["RTFT_TEST_TERM_MS"] = "1800";
  job_->Start(spec);
  WaitStep(0, 2);
  WaitStep(1, 2);
  job_->SignalLauncher(SIGTERM);
  ASSERT_TRUE(WaitLauncher().has_value());
  EXPECT_EQ(job_->Output().find("odls_base_sigkill_timeout"), std::string::npos) << job_->Output();
  for (int slot = 0; slot < 2; ++slot) {
    auto exits = LinesOf(dir_, slot, "exit");
    ASSERT_FALSE(exits.empty()) << "slot " << slot << " was killed before it finished\n"
                                << job_->Dump();
    EXPECT_EQ(Last(exits).Get("why"), "sigterm");
  }
}

}  // namespace
}  // namespace rtft::launch::test
