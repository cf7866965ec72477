// A process without the job's keys can neither join nor inject messages, and the coordinator
// logs every refusal. Malformed input from a peer that has the keys is rejected and logged too.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <thread>
#include <vector>

#include "control/control_test_util.h"
#include "control/net/zmq_util.h"
#include "control/wire/codec.h"
#include "control/wire/messages.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;
using testing::JobConfig;
using testing::TestJob;

// Waits until `pred` holds or two seconds pass.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 200; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

TEST(ControlSecurity, ClientWithAnotherKeyPairCannotJoinOrInject) {
  JobConfig cfg{2, 0};
  TestJob job(cfg);
  ::testing::internal::CaptureStderr();
  // An impostor that knows the server's public key but not the job's client key pair.
  auto other = GenerateJobKeys();
  ASSERT_TRUE(other.ok());
  AgentClientOptions o = job.ClientOptions(0);
  o.keys.client_public = other->client_public;
  o.keys.client_secret = other->client_secret;
  o.request_timeout = milliseconds(300);
  auto impostor = AgentClient::Connect(o);
  ASSERT_TRUE(impostor.ok());
  auto joined = (*impostor)->Join(milliseconds(400));
  EXPECT_EQ(joined.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*impostor)->KvPut("k", "forged").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*impostor)->ReportFailure(FailureKind::kDeviceError, 0, 0).code(),
            StatusCode::kDeadlineExceeded);

  // An outsider with entirely different keys (wrong server key too).
  AgentClientOptions w = job.ClientOptions(1);
  w.keys = *other;
  w.request_timeout = milliseconds(300);
  auto outsider = AgentClient::Connect(w);
  ASSERT_TRUE(outsider.ok());
  EXPECT_EQ((*outsider)->Join(milliseconds(400)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Eventually([&] { return job.coord().stats().rejected_peers >= 2; }));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused connection"), std::string::npos) << log;
  EXPECT_NE(log.find(other->client_public), std::string::npos) << log;
  EXPECT_EQ(job.coord().stats().messages, 0u);

  // Nothing the impostors sent had an effect: the real job starts at epoch 1 without the key.
  impostor->reset();
  outsider->reset();
  ASSERT_TRUE(job.JoinAll());
  EXPECT_EQ(job.first(0).epoch, 1u);
  EXPECT_EQ(job.agent(0).KvGet("k", milliseconds(100)).status().code(),
            StatusCode::kDeadlineExceeded);
}

TEST(ControlSecurity, MalformedMessagesAreRejectedAndLogged) {
  TestJob job(JobConfig{2, 0});
  ASSERT_TRUE(job.JoinAll());
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  ConfigureSocket(raw);
  MakeCurveClient(raw, job.keys());
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(job.coord().endpoint());
  ::testing::internal::CaptureStderr();
  // Garbage, a truncated header, a newer version, a 1.5 MiB frame, a wrong field type, a
  // heartbeat for a slot this peer never said hello for.
  std::string newer = *EncodeMessage(MsgType::kHeartbeat, HeartbeatBody(0, 1, 1));
  newer[4] = 9;
  std::string wrong_type = *EncodeMessage(MsgType::kHeartbeat, HeartbeatBody(0, 1, 1));
  wrong_type[wrong_type.size() - 1] = '\xc3';  // step: true instead of an integer
  const std::vector<std::string> bad = {
      "hello? this is not rt-ft",
      "RTFC",
      newer,
      std::string(1536 * 1024, 'x'),
      wrong_type,
      *EncodeMessage(MsgType::kHeartbeat, HeartbeatBody(1, 1, 1))};
  for (const auto& b : bad) ASSERT_TRUE(SendRaw(raw, nullptr, b));
  EXPECT_TRUE(Eventually([&] { return job.coord().stats().rejected_messages >= bad.size(); }));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("bad magic"), std::string::npos) << log;
  EXPECT_NE(log.find("newer than this build"), std::string::npos) << log;
  EXPECT_NE(log.find("exceeds the limit"), std::string::npos) << log;
  EXPECT_NE(log.find("did not say hello"), std::string::npos) << log;
  // The coordinator is unharmed.
  ASSERT_TRUE(job.agent(0).KvPut("still", "alive").ok());
  EXPECT_EQ(*job.agent(1).KvGet("still", milliseconds(1000)), "alive");
  EXPECT_EQ(job.coord().membership().epoch, 1u);
}

// A TCP connection to the coordinator's port that says nothing; -1 when refused.
int RawConnect(const std::string& endpoint) {
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// 600 connect/close cycles: each refusal names the peer (address:port, not the coordinator's own
// endpoint), and at most ten are logged a second.
TEST(ControlSecurity, RefusedHandshakesNameThePeerAndAreRateLimited) {
  TestJob job(JobConfig{2, 0});
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 600; ++i) {
    const int fd = RawConnect(job.coord().endpoint());
    if (fd >= 0) ::close(fd);
  }
  EXPECT_TRUE(Eventually([&] { return job.coord().stats().rejected_peers >= 300; }))
      << job.coord().stats().rejected_peers;
  // One more refusal once the limiter's one-second window is over: it is logged, with the count
  // of those the window dropped (without it, a machine fast enough to refuse all 600 within one
  // window would log no count at all).
  const auto window_over = std::chrono::steady_clock::now() + std::chrono::milliseconds(1100);
  while (std::chrono::steady_clock::now() < window_over)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t before = job.coord().stats().rejected_peers;
  const int fd = RawConnect(job.coord().endpoint());
  if (fd >= 0) ::close(fd);
  EXPECT_TRUE(Eventually([&] { return job.coord().stats().rejected_peers > before; }));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = ::testing::internal::GetCapturedStderr();
  const size_t lines = Count(log, "refused connection from");
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, static_cast<size_t>(10 * (seconds + 2))) << "in " << seconds << " s\n" << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("refused connection from 127\\.0\\.0\\.1:[0-9]+:")))
      << log;
  EXPECT_EQ(log.find("refused connection from tcp://"), std::string::npos) << log;
  EXPECT_NE(log.find("more refusals not logged"), std::string::npos) << log;
  ASSERT_TRUE(job.JoinAll());
}

// Idle connections beyond the cap are closed as they are accepted; the job's own agents join once
// the idle ones have run out their handshake interval.
TEST(ControlSecurity, ConnectionsInTheirHandshakeAreCapped) {
  JobConfig cfg{2, 0};
  cfg.max_pending_connections = 20;
  cfg.handshake_timeout = milliseconds(1000);
  TestJob job(cfg);
  ::testing::internal::CaptureStderr();
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i)
    if (int fd = RawConnect(job.coord().endpoint()); fd >= 0) idle.push_back(fd);
  EXPECT_TRUE(Eventually([&] { return job.coord().stats().closed_connections >= 80; }))
      << job.coord().stats().closed_connections;
  ASSERT_TRUE(job.JoinAll());
  for (int fd : idle) ::close(fd);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("connections are already in their handshake (limit 20)"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace rtft::control
