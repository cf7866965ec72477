// How a job that cannot start ends, under real mpirun --enable-recovery (which itself exits 0
// whatever happened): a slot lost during start-up ends every other slot at the bootstrap deadline
// instead of leaving them in MPI_Init forever, and bad usage (options, key file, application)
// is exit code 2 on every slot, with the exit-code file and the `job exit code` line written.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

class BootstrapTest : public JobFixture {
 protected:
  JobSpec Spec(int slots, int spares, std::vector<std::string> extra = {}) {
    JobSpec spec = BaseSpec(slots, spares, /*steps=*/10);
    spec.dp_args.insert(spec.dp_args.end(), extra.begin(), extra.end());
    return spec;
  }
  // The job's exit code (the file slot 0 writes), once mpirun returned 0.
  int Finish() {
    auto rc = WaitLauncher(seconds(40));
    if (rc) EXPECT_EQ(*rc, 0) << job_->Dump();
    return job_->JobExitCode();
  }
  // A job that must be refused as bad usage, before any application starts.
  void ExpectUsageError(const JobSpec& spec, const std::string& why) {
    job_->Start(spec);
    EXPECT_EQ(Finish(), 2) << job_->Dump();
    EXPECT_NE(job_->Output().find("job exit code 2"), std::string::npos) << job_->Output();
    EXPECT_NE(job_->Output().find(why), std::string::npos) << job_->Output();
    for (int slot = 0; slot < spec.slots; ++slot)
      EXPECT_TRUE(ReadSlotLog(dir_, slot).empty()) << "an application started\n" << job_->Dump();
  }
  std::string KeyFile(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(std::system((DpLaunchUnderTest() + " --new-key-file " + path).c_str()), 0);
    return path;
  }
};

// The fourth slot dies before MPI_Init (as a dp-launch SIGKILLed at start would): the three
// dp-launch wait in MPI_Init, which has no deadline, until the bootstrap watchdog ends them.
TEST_F(BootstrapTest, SlotLostDuringStartUpEndsTheJobAtTheDeadline) {
  JobSpec spec = Spec(4, 1, {"--join-timeout-s", "3"});
  spec.extra_context = {"-np", "1", "/bin/sh", "-c", "kill -KILL $$"};
  job_->Start(spec);
  EXPECT_EQ(Finish(), 1) << job_->Dump();
  EXPECT_NE(job_->Output().find("the bootstrap did not complete within 3 s"), std::string::npos)
      << job_->Output();
  EXPECT_NE(job_->Output().find("job exit code 1"), std::string::npos) << job_->Output();
}

TEST_F(BootstrapTest, SparesNotBelowTheSlotsIsBadUsage) {
  ExpectUsageError(Spec(2, 2), "leaves no active slot");
}

TEST_F(BootstrapTest, AGridThatIsNoTxPOrDoesNotDivideTheRanksIsBadUsage) {
  ExpectUsageError(Spec(2, 0, {"--grid", "2x0"}), "use TxP");
  ExpectUsageError(Spec(2, 0, {"--grid", "2"}), "use TxP");
  ExpectUsageError(Spec(2, 0, {"--grid", "99999x1"}), "use TxP");
  ExpectUsageError(Spec(3, 0, {"--grid", "2x1"}), "does not divide the 3 active slots");
}

TEST_F(BootstrapTest, KeyFileReadableByOthersIsBadUsage) {
  const std::string keys = KeyFile("job.keys");
  ASSERT_EQ(chmod(keys.c_str(), 0644), 0);
  ExpectUsageError(Spec(2, 0, {"--job-key-file", keys}), "mode 0644");
}

TEST_F(BootstrapTest, KeyFileWithGarbageIsBadUsage) {
  const std::string keys = dir_ + "/garbage.keys";
  std::ofstream(keys) << "this is not a key file\n";
  ASSERT_EQ(chmod(keys.c_str(), 0600), 0);
  ExpectUsageError(Spec(2, 0, {"--job-key-file", keys}), "bad line");
}

TEST_F(BootstrapTest, KeyFileWithAForeignPublicKeyIsBadUsage) {
  const std::string a = KeyFile("a.keys"), b = KeyFile("b.keys");
  std::ifstream in_a(a), in_b(b);
  std::string line, mixed;
  while (std::getline(in_a, line))
    if (line.rfind("server_public", 0) != 0) mixed += line + "\n";
  while (std::getline(in_b, line))
    if (line.rfind("server_public", 0) == 0) mixed += line + "\n";
  const std::string keys = dir_ + "/mixed.keys";
  std::ofstream(keys) << mixed;
  ASSERT_EQ(chmod(keys.c_str(), 0600), 0);
  ExpectUsageError(Spec(2, 0, {"--job-key-file", keys}), "does not match");
}

TEST_F(BootstrapTest, MissingKeyFileIsBadUsage) {
  ExpectUsageError(Spec(2, 0, {"--job-key-file", dir_ + "/missing.keys"}), "missing.keys");
}

TEST_F(BootstrapTest, MissingApplicationIsBadUsage) {
  JobSpec spec = Spec(3, 1);
  spec.app = {dir_ + "/no-such-app"};
  ExpectUsageError(spec, "cannot be executed");
}

// Executable on slots 0 and 2, not on slot 1 (a file without the execute bit there): checked on
// every slot before any joins, so the job ends with 2 instead of restarting an application that
// cannot start.
TEST_F(BootstrapTest, ApplicationNotExecutableOnOneSlotIsBadUsage) {
  const std::string plain = dir_ + "/not-executable";
  std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
  ASSERT_EQ(chmod(plain.c_str(), 0644), 0);
  JobSpec spec = Spec(3, 1);
  spec.per_slot_args = {{}, {}, {}};
  spec.per_slot_app = {{RTFT_TEST_APP}, {plain}, {RTFT_TEST_APP}};
  ExpectUsageError(spec, "slot 1");
}

// One slot's options are refused before the bootstrap: it exits 2 and writes 2, the others end at
// the bootstrap deadline and leave that code in place.
TEST_F(BootstrapTest, BadOptionOnOneSlotIsBadUsage) {
  JobSpec spec = Spec(3, 1, {"--join-timeout-s", "3"});
  spec.per_slot_args = {{}, {"--shutdown-grace-s", "often"}, {}};
  job_->Start(spec);
  EXPECT_EQ(Finish(), 2) << job_->Dump();
  EXPECT_NE(job_->Output().find("--shutdown-grace-s 'often' is not an integer"), std::string::npos)
      << job_->Output();
}

// Without a launcher: the same codes.
TEST_F(BootstrapTest, OneSlotWithoutLauncherRefusesBadUsageWithTwo) {
  const std::string base = "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK -u SLURM_PROCID " +
                           DpLaunchUnderTest() + " --exit-code-file " + dir_ + "/exit-code ";
  for (const std::string& args :
       {std::string("-- ") + dir_ + "/no-such-app", std::string("--spares 1 -- /bin/true"),
        std::string("--watchdog-s -1 -- /bin/true"), std::string("--no-such-option -- /bin/true"),
        std::string("--heartbeat-ms 1 --heartbeat-ms 2 -- /bin/true")}) {
    unlink((dir_ + "/exit-code").c_str());
    const int status = std::system((base + args + " 2>/dev/null").c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 2) << args;
    EXPECT_EQ(job_->JobExitCode(), 2) << args;
  }
}

}  // namespace
}  // namespace rtft::launch::test
