// The Fortran module in a real job: protect_test (tests/fortran/protect_test.f90) on 2 ranks
// under `mpirun --enable-recovery dp-launch`, with slot 1's process SIGKILLed at a named point of
// a step (RTFT_FAULT="1/protect.update@7:kill"). dp-launch restarts it on its slot, it resumes
// from its own L1 snapshot, and every rank's array must equal the same steps computed without
// rt-ft, bit for bit (the program checks and prints PASS).
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

std::string RunJob(const std::string& dir, const std::string& fault, int* exit_code) {
  std::filesystem::create_directories(dir);
  Job job(dir);
  JobSpec spec;
  spec.slots = 2;
  spec.dp_args = {"--spares", "0", "--heartbeat-ms", "50", "--heartbeat-timeout-ms", "500"};
  spec.app = {RTFT_FORTRAN_APP, "20"};
  spec.env = {{"RTFT_FAULT_LOG", dir + "/faults.log"}, {"RTFT_COMM_GLOO_HOST", "127.0.0.1"}};
  if (!fault.empty()) spec.env["RTFT_FAULT"] = fault;
  job.Start(spec);
  EXPECT_TRUE(job.Wait(seconds(120)).has_value()) << "the job did not end\n" << job.Output();
  *exit_code = job.JobExitCode();
  return job.Output();
}

TEST(FortranJobTest, AProtectedArraySurvivesItsOwnSigkill) {
  char tmpl[] = "/tmp/rtft-fortran-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  int code = -1;
  const std::string plain = RunJob(root + "/plain", "", &code);
  EXPECT_EQ(code, 0) << plain;
  for (const char* line : {"fortran 0: PASS (20 steps)", "fortran 1: PASS (20 steps)"})
    EXPECT_NE(plain.find(line), std::string::npos) << line << "\n" << plain;

  const std::string crash = RunJob(root + "/crash", "1/protect.update@7:kill", &code);
  EXPECT_EQ(code, 0) << crash;
  std::ifstream in(root + "/crash/faults.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("protect.update kill"), std::string::npos) << log;
  // The process restarted on slot 1 resumes from its own snapshot at the step it died in (6), or
  // at the one before where the kill came before step 6's capture was sealed (its checksums are
  // computed beside the step: on a loaded machine they may not be done by the update), with
  // rank 0 at the same step.
  EXPECT_NE(crash.find("fortran 1: role 2"), std::string::npos) << crash;
  std::smatch at;
  ASSERT_TRUE(std::regex_search(crash, at, std::regex("fortran 1: resumed at step ([56])\n")))
      << crash;
  EXPECT_NE(crash.find("fortran 0: recovered at step " + at[1].str() + "\n"), std::string::npos)
      << crash;
  for (const char* line : {"fortran 0: PASS (20 steps)", "fortran 1: PASS (20 steps)"})
    EXPECT_NE(crash.find(line), std::string::npos) << line << "\n" << crash;
  if (!HasFailure()) {
    std::error_code e;
    std::filesystem::remove_all(root, e);
  }
}

}  // namespace
}  // namespace rtft::launch::test
