// Every blocking call of the agent client has a deadline (STYLE.md rule 6): with the
// coordinator's process stopped by SIGSTOP, requests fail on time and the coordinator is
// declared lost after coordinator_timeout.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "control/agent/agent_client.h"
#include "control/coordinator/coordinator.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A coordinator in a child process (forked before this process has any thread).
pid_t StartCoordinatorProcess(const JobKeys& keys, std::string* endpoint) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    CoordinatorOptions o;
    o.bind_host = "127.0.0.1";
    o.keys = keys;
    o.slots = 1;
    auto c = Coordinator::Start(o);
    if (!c.ok()) ::_exit(2);
    const std::string line = (*c)->endpoint() + "\n";
    if (::write(fds[1], line.data(), line.size()) < 0) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char buf[256];
  ssize_t n = ::read(fds[0], buf, sizeof(buf) - 1);
  ::close(fds[0]);
  if (n <= 1) return -1;
  endpoint->assign(buf, n - 1);
  return pid;
}

TEST(ControlDeadlines, StoppedCoordinatorTimesRequestsOutAndIsDeclaredLost) {
  auto keys = GenerateJobKeys();
  ASSERT_TRUE(keys.ok());
  std::string endpoint;
  const pid_t pid = StartCoordinatorProcess(*keys, &endpoint);
  ASSERT_GT(pid, 0);
  AgentClientOptions o;
  o.endpoint = endpoint;
  o.keys = *keys;
  o.me = {0, "localhost", static_cast<int32_t>(::getpid())};
  o.heartbeat_period = milliseconds(20);
  o.request_timeout = milliseconds(300);
  o.coordinator_timeout = milliseconds(1000);
  auto client = AgentClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  AgentClient& c = **client;
  auto a = c.Join(milliseconds(5000));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rank, 0);
  ASSERT_TRUE(c.KvPut("k", "v").ok());

  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  auto t = Clock::now();
  EXPECT_EQ(c.KvGet("k2", milliseconds(100)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(MsSince(t), 390);  // get timeout + request timeout
  EXPECT_LE(MsSince(t), 1000);
  t = Clock::now();
  EXPECT_EQ(c.ReportExit(0).code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(MsSince(t), 290);
  EXPECT_LE(MsSince(t), 900);
  // Nothing from the coordinator for coordinator_timeout: lost.
  auto e = c.WaitEvent(milliseconds(5000));
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c.KvPut("k", "v").code(), StatusCode::kUnavailable);

  ::kill(pid, SIGKILL);
  ::kill(pid, SIGCONT);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace
}  // namespace rtft::control
