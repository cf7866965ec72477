// heatdis (examples/heatdis, and its C twin examples/heatdis_c) as a user runs it: alone, and
// under `mpirun --enable-recovery dp-launch` with a rank failed in the middle of a protected step
// (RTFT_FAULT="1/heatdis.iteration@n:...": slot 1's first process, at its n-th iteration). Every
// field is compared bit for bit with an independent numpy model of the scheme and with the
// failure-free run's (tests/examples/heatdis_check.py, through Debian's /usr/bin/python3), and
// every residual printed with the model's.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"
#include "rtft/checkpoint.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

// 598 interior rows (uneven over 3 or 4 ranks), 600 iterations: the front reaches row 600, so
// the cells ahead of it hold subnormal values, which a build that flushes them would get wrong.
const std::vector<std::string> kGrid = {"--rows",           "600", "--cols",          "16",
                                        "--iterations",     "600", "--protect-every", "10",
                                        "--residual-every", "50"};

class HeatdisTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rtft-heatdis-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    program_ = std::string(RTFT_EXAMPLES_DIR) + "/" + GetParam();
  }
  void TearDown() override {
    if (!HasFailure()) {
      std::error_code e;
      std::filesystem::remove_all(root_, e);
    }
  }

  struct Run {
    std::string dir, field, output;
    int exit_code = -1;
  };

  // kGrid and --output, with `extra`'s options (pairs) in place of theirs or after them.
  std::vector<std::string> Args(const Run& run, const std::vector<std::string>& extra) const {
    std::vector<std::string> args = kGrid;
    args.insert(args.end(), {"--output", run.field});
    for (size_t i = 0; i + 1 < extra.size(); i += 2) {
      auto at = std::find(args.begin(), args.end(), extra[i]);
      if (at == args.end()) at = args.insert(args.end(), {extra[i], ""});
      *(at + 1) = extra[i + 1];
    }
    return args;
  }

  Run NewRun(const std::string& name) const {
    Run run;
    run.dir = root_ + "/" + name;
    run.field = run.dir + "/field.h5";
    std::filesystem::create_directories(run.dir);
    return run;
  }

  // The program alone: rank 0 of 1, no dp-launch.
  Run Alone(const std::string& name, const std::vector<std::string>& extra) const {
    Run run = NewRun(name);
    std::string cmd = program_;
    for (const std::string& a : Args(run, extra)) cmd += " '" + a + "'";
    run.exit_code = WEXITSTATUS(std::system((cmd + " > " + run.dir + "/log 2>&1").c_str()));
    run.output = Read(run.dir + "/log");
    return run;
  }

  // `active` ranks and `spares` spares under dp-launch; `fault` arms points (RTFT_FAULT), and
  // with `lose` slot 1's dp-launch is SIGKILLed once its process stands at the point.
  Run Job(const std::string& name, int active, int spares, const std::string& fault = "",
          bool lose = false, const std::vector<std::string>& extra = {},
          const std::vector<std::string>& dp_extra = {}) const {
    Run run = NewRun(name);
    launch::test::Job job(run.dir);
    JobSpec spec;
    spec.slots = active + spares;
    spec.dp_args = {"--spares", std::to_string(spares),   "--heartbeat-ms",
                    "50",       "--heartbeat-timeout-ms", "500"};
    spec.dp_args.insert(spec.dp_args.end(), dp_extra.begin(), dp_extra.end());
    spec.app = {program_};
    for (const std::string& a : Args(run, extra)) spec.app.push_back(a);
    spec.env = {{"RTFT_FAULT_LOG", run.dir + "/faults.log"}, {"RTFT_COMM_GLOO_HOST", "127.0.0.1"}};
    if (!fault.empty()) spec.env["RTFT_FAULT"] = fault;
    job.Start(spec);
    if (lose) {
      EXPECT_TRUE(WaitFor([&] { return !Read(run.dir + "/faults.log").empty(); }, seconds(60)))
          << job.Output();
      const pid_t agent = job.AgentOf(1);
      EXPECT_GT(agent, 0);
      if (agent > 0) kill(agent, SIGKILL);
    }
    EXPECT_TRUE(job.Wait(seconds(120)).has_value()) << "the job did not end\n" << job.Output();
    run.exit_code = job.JobExitCode();
    run.output = job.Output();
    std::ofstream(run.dir + "/log") << run.output;
    if (!fault.empty())
      EXPECT_NE(Read(run.dir + "/faults.log").find("slot=1"), std::string::npos)
          << "the fault never fired\n"
          << run.output;
    return run;
  }

  // The field and the residuals of `run` against the model (and `ref`'s field, when given);
  // `before` printed the residuals before a job started again.
  void ExpectTheModel(const Run& run, const Run* ref = nullptr, const Run* before = nullptr) const {
    ASSERT_EQ(run.exit_code, 0) << run.output;
    std::string cmd = std::string("/usr/bin/python3 ") + RTFT_HEATDIS_CHECK;
    for (size_t i = 0; i < kGrid.size(); i += 2)
      if (kGrid[i] != "--protect-every") cmd += " " + kGrid[i] + " " + kGrid[i + 1];
    cmd += " --expect-subnormal";
    if (ref) cmd += " --same-as " + ref->field;
    cmd += " " + run.field + " " + run.dir + "/log";
    if (before) cmd += " " + before->dir + "/log";
    cmd += " > " + run.dir + "/check 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string check = Read(run.dir + "/check");
    EXPECT_EQ(rc, 0) << check << "\n" << run.output;
    EXPECT_NE(check.find("PASS: "), std::string::npos) << check;
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string root_, program_;
};

TEST_P(HeatdisTest, AloneEqualsTheModelBitForBit) {
  ExpectTheModel(Alone("alone", {}));
  // Steps of an odd number of iterations that does not divide I (the field copied back).
  ExpectTheModel(Alone("alone-odd", {"--protect-every", "7"}));
}

TEST_P(HeatdisTest, RefusesBadOptionsWithAClearError) {
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--rows", "2"},
                                             {"--cols", "-1"},
                                             {"--iterations", "0"},
                                             {"--protect-every", "0"},
                                             {"--residual-every", "x"},
                                             {"--rows", "70000", "--cols", "70000"}}) {
    Run run = Alone("bad", bad);
    EXPECT_NE(run.exit_code, 0) << bad[0] << " " << bad[1];
    EXPECT_NE(run.output.find(bad[0]), std::string::npos) << run.output;
  }
}

TEST_P(HeatdisTest, ThreeRanksEqualTheModelAndMoreRanksThanRowsAreRefused) {
  ExpectTheModel(Job("ranks", 3, 1));
  Run many = Job("too-many", 3, 0, "", false, {"--rows", "4"});
  EXPECT_NE(many.exit_code, 0) << many.output;
  EXPECT_NE(many.output.find("more ranks than the grid's 2 interior rows"), std::string::npos)
      << many.output;
}

TEST_P(HeatdisTest, ALostSlotEndsBitwiseLikeTheRunWithoutTheFailure) {
  const Run ref = Job("ref", 3, 1);
  ExpectTheModel(ref);
  // Iteration 237 is the 7th of step 23: slot 1 stands there while its agent is SIGKILLed; the
  // spare takes rank 1, fed from its neighbour's replica, and every rank redoes step 23.
  const Run lost = Job("lost", 3, 1, "1/heatdis.iteration@237:hang", /*lose=*/true);
  EXPECT_NE(lost.output.find("recovered epoch"), std::string::npos) << lost.output;
  ExpectTheModel(lost, &ref);
}

TEST_P(HeatdisTest, ACrashedProcessRestartedOnItsSlotEndsBitwiseTheSame) {
  const Run crash = Job("crash", 3, 1, "1/heatdis.iteration@155:kill");
  EXPECT_NE(crash.output.find("recovered epoch"), std::string::npos) << crash.output;
  ExpectTheModel(crash);
}

TEST_P(HeatdisTest, WithoutASpareTheSurvivorsShrinkAndEndBitwiseTheSame) {
  // The field does not depend on the number of ranks: three survivors take the 598 rows over
  // (rt-ft splits them again and fills the new blocks) and end with the model's bits.
  const Run shrink = Job("shrink", 4, 0, "1/heatdis.iteration@301:hang", /*lose=*/true, {},
                         {"--on-spares-exhausted", "shrink"});
  EXPECT_NE(shrink.output.find("again on 3 ranks"), std::string::npos) << shrink.output;
  ExpectTheModel(shrink);
}

TEST_P(HeatdisTest, CheckpointAndExitThenTheJobStartedAgainEndsBitwiseTheSame) {
  // No spare and checkpoint-and-exit: the survivors write the L3 version of the step in which
  // slot 1 was lost and exit 0 without a field; started again, the job resumes from it.
  const std::string ckpt = root_ + "/ckpt";
  const std::vector<std::string> l3 = {"--l3-every", "4", "--ckpt-dir", ckpt};
  const Run first = Job("exit", 3, 0, "1/heatdis.iteration@415:hang", /*lose=*/true, l3,
                        {"--on-spares-exhausted", "checkpoint-and-exit"});
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_FALSE(std::ifstream(first.field).good()) << first.output;
  auto latest = LatestVersion(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  // Iteration 415 is in step 41; 40 if slot 1 was lost before its replica of 41 was sealed.
  EXPECT_TRUE(*latest == 41u || *latest == 40u) << *latest;
  EXPECT_TRUE(VerifyVersion(ckpt, *latest).ok());
  const Run again = Job("again", 3, 0, "", false, l3);
  ExpectTheModel(again, nullptr, &first);
  latest = LatestVersion(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 56u);  // L3 every 4 steps: the last of the 60 steps written is 56
}

INSTANTIATE_TEST_SUITE_P(Heatdis, HeatdisTest, ::testing::Values(RTFT_HEATDIS_PROGRAMS),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace rtft::launch::test
