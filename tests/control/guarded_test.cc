// Every background thread of the control plane ends with a recorded error, not std::terminate,
// when an exception escapes its body (core/thread.h's guard, tested on its own in
// tests/core/thread_test.cc): the coordinator (the job then ends with exit code 1), the
// agent client (every call returns the error) and the event loop that the local link runs on.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "control/control_test_util.h"
#include "control/net/event_loop.h"
#include "control/wire/messages.h"
#include "core/thread.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

TEST(Guarded, CoordinatorThreadFailureEndsTheJobWithItsError) {
  auto keys = GenerateJobKeys();
  ASSERT_TRUE(keys.ok());
  CoordinatorOptions o;
  o.bind_host = "127.0.0.1";
  o.keys = *keys;
  o.slots = 2;
  std::atomic<int> rounds{0};
  o.fault_point = [&] {
    if (++rounds == 5) throw std::runtime_error("injected");
  };
  auto c = Coordinator::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto code = (*c)->WaitJobEndFor(milliseconds(5000));
  ASSERT_TRUE(code.has_value()) << "the job did not end";
  EXPECT_EQ(*code, 1);
  EXPECT_EQ((*c)->error().code(), StatusCode::kInternal);
  EXPECT_NE((*c)->error().message().find("coordinator's thread ended by an exception: injected"),
            std::string::npos)
      << (*c)->error();
}

TEST(Guarded, AgentClientThreadFailureFailsEveryCall) {
  testing::TestJob job(testing::JobConfig{1, 0});
  AgentClientOptions o = job.ClientOptions(0);
  std::atomic<bool> fail{false};
  o.fault_point = [&] {
    if (fail) throw std::runtime_error("injected");
  };
  auto client = AgentClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(milliseconds(5000)).ok());
  fail = true;
  StatusOr<std::optional<ControlEvent>> ev = std::optional<ControlEvent>();
  for (int i = 0; i < 50 && ev.ok(); ++i) ev = (*client)->WaitEvent(milliseconds(100));
  ASSERT_FALSE(ev.ok()) << "the client's thread failure went unnoticed";
  EXPECT_EQ(ev.status().code(), StatusCode::kInternal);
  EXPECT_NE(ev.status().message().find("injected"), std::string::npos) << ev.status();
  EXPECT_EQ((*client)->ReportExit(0).code(), StatusCode::kInternal);
}

TEST(Guarded, EventLoopHandlerExceptionIsRecorded) {
  zmq::context_t ctx;
  zmq::socket_t server(ctx, zmq::socket_type::router);
  server.bind("inproc://guarded-loop");
  std::atomic<bool> called{false};
  std::atomic<bool> reported{false};
  EventLoop::Options o;
  o.on_error = [&](const Status& s) { reported = s.code() == StatusCode::kInternal; };
  EventLoop loop(o);
  const auto id = loop.AddSocket(std::move(server), true, "test", [&](const std::string&, Message) {
    called = true;
    throw std::runtime_error("handler failed");
  });
  ASSERT_TRUE(loop.Start().ok());
  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.connect("inproc://guarded-loop");
  ASSERT_TRUE(SendTo(client, nullptr, MsgType::kAttach, AttachBody(1)));
  for (int i = 0; i < 200 && loop.error().ok(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(called);
  EXPECT_EQ(loop.error().code(), StatusCode::kInternal);
  EXPECT_NE(loop.error().message().find("handler failed"), std::string::npos) << loop.error();
  for (int i = 0; i < 200 && !reported; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(reported) << "the owner was not told";
  EXPECT_EQ(loop.Post(id, "peer", MsgType::kAssign, AssignBody({})).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace rtft::control
