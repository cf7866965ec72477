// A stranger on the network, without the job's keys, cannot end the job (docs/launcher.md
// "Descriptors"): under real mpirun --enable-recovery, 1500 idle TCP connections to slot 0's
// coordinator while slot 0's application crashes and must be restarted there.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/job_fixture.h"
#include "launcher/launch_job.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

// The coordinator's port, from slot 0's log line "coordinator at tcp://HOST:PORT".
int CoordinatorPort(const std::string& output) {
  std::smatch m;
  static const std::regex re("coordinator at tcp://[^:\\s]+:([0-9]+)");
  return std::regex_search(output, m, re) ? std::stoi(m[1]) : 0;
}

// Soft "Max open files" of a process.
long SoftFileLimit(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Max open files", 0) == 0) return std::atol(line.c_str() + 26);
  return -1;
}

class StrangerTest : public JobFixture {};

TEST_F(StrangerTest, IdleConnectionsToSlotZeroCannotStopARestart) {
  constexpr int kConnections = 1500;
  rlimit mine{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &mine), 0);
  if (mine.rlim_max < kConnections + 200)
    GTEST_SKIP() << "the test needs " << kConnections + 200 << " descriptors";
  mine.rlim_cur = mine.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &mine), 0);

  // The ranks run until told to finish: the test takes as long as the stranger needs.
  JobSpec spec = BaseSpec(3, 1, /*steps=*/1000000);
  spec.dp_args.insert(spec.dp_args.end(), {"--log-level", "info"});
  spec.nofile_soft = 1000;  // dp-launch raises its own to the hard limit; the application not
  spec.nofile_hard = 1024;
  job_->Start(spec);
  WaitStep(0, 3);
  const int port = CoordinatorPort(job_->Output());
  ASSERT_GT(port, 0) << job_->Output();
  const pid_t agent = job_->AgentOf(0);
  ASSERT_GT(agent, 0);
  EXPECT_EQ(SoftFileLimit(agent), 1024);

  // The stranger connects and says nothing.
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  EXPECT_GE(fds.size(), 1000u) << "the stranger could not connect";
  std::printf("the stranger holds %zu connections\n", fds.size());

  // Slot 0's application crashes and needs descriptors to be started again.
  Command(0, "crash");
  EXPECT_TRUE(WaitFor([&] { return Starts(0).size() == 2; }, seconds(30))) << job_->Dump();
  for (int fd : fds) close(fd);
  Command(0, "exit 0");
  Command(1, "exit 0");
  auto rc = WaitLauncher();
  EXPECT_EQ(rc.value_or(-1), 0);
  EXPECT_EQ(job_->JobExitCode(), 0) << job_->Dump();
  for (const auto& l : LinesOf(dir_, 0, "launched"))
    EXPECT_EQ(l.Int("nofile"), 1000) << "the application did not get its own limit back";
  EXPECT_NE(job_->Output().find("connections are already in their handshake"), std::string::npos)
      << job_->Output().substr(0, 4000);
}

}  // namespace
}  // namespace rtft::launch::test
