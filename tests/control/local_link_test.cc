// The agent <-> application link over ipc:// in a private directory.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <thread>

#include "control/link/local_link.h"

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

class LocalLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeLocalLinkDir();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    path_ = dir_ + "/agent.sock";
  }
  void TearDown() override { ::rmdir(dir_.c_str()); }
  std::string dir_, path_;
};

TEST_F(LocalLinkTest, DirectoryIsPrivate) {
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(LocalServer::Bind(path_).status().code(), StatusCode::kPermissionDenied);
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_EQ(LocalServer::Bind(std::string(200, 'x')).status().code(), StatusCode::kInvalidArgument);
}

// A SIGKILLed agent cannot remove its link directory: the next agent removes those whose pid is
// gone, and nothing else.
TEST(LocalLinkDir, DirectoriesOfDeadAgentsAreRemoved) {
  char parent[] = "/tmp/rtft-link-dir-test-XXXXXX";
  ASSERT_NE(::mkdtemp(parent), nullptr);
  const pid_t dead = ::fork();
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string p = parent;
  const std::string stale = p + "/rtft-agent-" + std::to_string(dead) + "-abcdef";
  const std::string live = p + "/rtft-agent-" + std::to_string(::getppid()) + "-abcdef";
  const std::string other = p + "/rtft-agent-" + std::to_string(dead) + "-not-ours";
  for (const auto& d : {stale, live, other}) ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::mkfifo((stale + "/link").c_str(), 0600), 0);
  ::setenv("TMPDIR", parent, 1);
  auto made = MakeLocalLinkDir();
  ::unsetenv("TMPDIR");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->rfind(p + "/rtft-agent-" + std::to_string(::getpid()) + "-", 0), 0u) << *made;
  struct stat st {};
  EXPECT_NE(::stat(stale.c_str(), &st), 0) << "the dead agent's directory is still there";
  EXPECT_EQ(::stat(live.c_str(), &st), 0);
  EXPECT_EQ(::stat(other.c_str(), &st), 0) << "a name that is not a link directory's";
  std::error_code ec;
  std::filesystem::remove_all(p, ec);
}

TEST_F(LocalLinkTest, AttachAssignEventsReportsAndKv) {
  auto server = LocalServer::Bind(path_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->SendAssignment({}).code(), StatusCode::kFailedPrecondition);
  auto client = LocalClient::Connect(path_);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Attach(4242).ok());
  auto pid = (*server)->WaitAttach(milliseconds(3000));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, 4242);

  // A warm spare waits for its assignment.
  EXPECT_EQ((*client)->WaitAssignment(milliseconds(50)).status().code(),
            StatusCode::kDeadlineExceeded);
  Assignment a{Role::kActivated, 3, 7, 4};
  ASSERT_TRUE((*server)->SendAssignment(a).ok());
  auto got = (*client)->WaitAssignment(milliseconds(3000));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->role, Role::kActivated);
  EXPECT_EQ(got->rank, 3);
  EXPECT_EQ(got->epoch, 7u);
  EXPECT_EQ(got->world_size, 4);

  ControlEvent e;
  e.type = ControlEvent::Type::kShutdown;
  e.membership.epoch = 8;
  e.membership.world_size = 2;
  e.membership.rank_to_slot = {0, 2};
  e.membership.retired = {1};
  e.membership.slot_roles = {Role::kActive, Role::kRetired, Role::kActivated};
  e.failed_ranks = {1};
  e.reason = "test";
  e.checkpoint_first = true;
  e.assignment = {Role::kActivated, 1, 8, 2};
  ASSERT_TRUE((*server)->SendEvent(e).ok());
  auto ev = (*client)->PollEvent(milliseconds(3000));
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->type, ControlEvent::Type::kShutdown);
  EXPECT_TRUE((*ev)->checkpoint_first);
  EXPECT_EQ((*ev)->membership.rank_to_slot, e.membership.rank_to_slot);
  EXPECT_EQ((*ev)->failed_ranks, e.failed_ranks);
  EXPECT_EQ((*ev)->assignment.rank, 1);
  EXPECT_EQ((*ev)->assignment.role, Role::kActivated);

  RuntimeReport progress;
  progress.step = 99;
  ASSERT_TRUE((*client)->Report(progress).ok());
  auto rep = (*server)->PollReport(milliseconds(3000));
  ASSERT_TRUE(rep.ok() && rep->has_value());
  EXPECT_EQ((*rep)->type, RuntimeReport::Type::kProgress);
  EXPECT_EQ((*rep)->step, 99u);

  // KV through the agent: the agent answers the runtime's get.
  ASSERT_TRUE((*client)->KvPut("k", std::string("\0v", 2)).ok());
  auto put = (*server)->PollReport(milliseconds(3000));
  ASSERT_TRUE(put.ok() && put->has_value());
  EXPECT_EQ((*put)->type, RuntimeReport::Type::kKvPut);
  EXPECT_EQ((*put)->value, std::string("\0v", 2));
  std::thread agent([&] {
    auto get = (*server)->PollReport(milliseconds(3000));
    ASSERT_TRUE(get.ok() && get->has_value());
    EXPECT_EQ((*get)->type, RuntimeReport::Type::kKvGet);
    EXPECT_EQ((*get)->timeout_ms, 500);
    EXPECT_TRUE((*server)->SendKvReply((*get)->key, std::string("value")).ok());
  });
  auto kv = (*client)->KvGet("k", milliseconds(500));
  agent.join();
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(*kv, "value");
}

// A planned swap's pause wakes the runtime's wait for events at once and is taken once; the
// newest notice replaces one not taken yet.
TEST_F(LocalLinkTest, APauseNoticeWakesThePollAndIsTakenOnce) {
  auto server = LocalServer::Bind(path_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = LocalClient::Connect(path_);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Attach(7).ok());
  ASSERT_TRUE((*server)->WaitAttach(milliseconds(3000)).ok());
  EXPECT_FALSE((*client)->TakePause().has_value());
  ASSERT_TRUE((*server)->SendPause(PauseNotice{3, 40, false}).ok());
  ASSERT_TRUE((*server)->SendPause(PauseNotice{3, 41, false}).ok());
  // The poll returns (no event) once the notices are in: waited for, not slept on.
  std::optional<PauseNotice> got;
  for (int i = 0; i < 300 && !(got && got->step == 41); ++i) {
    auto ev = (*client)->PollEvent(milliseconds(10000));
    ASSERT_TRUE(ev.ok()) << ev.status();
    EXPECT_FALSE(ev->has_value());
    if (auto p = (*client)->TakePause()) got = p;
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->epoch, 3u);
  EXPECT_EQ(got->step, 41u);
  EXPECT_FALSE(got->cancel);
  EXPECT_FALSE((*client)->TakePause().has_value());
  // The runtime's answer: paused there.
  RuntimeReport paused;
  paused.type = RuntimeReport::Type::kPaused;
  paused.epoch = 3;
  paused.step = 41;
  ASSERT_TRUE((*client)->Report(paused).ok());
  auto rep = (*server)->PollReport(milliseconds(3000));
  ASSERT_TRUE(rep.ok() && rep->has_value());
  EXPECT_EQ((*rep)->type, RuntimeReport::Type::kPaused);
  EXPECT_EQ((*rep)->step, 41u);
}

TEST_F(LocalLinkTest, RestartedApplicationReplacesTheOldOne) {
  auto server = LocalServer::Bind(path_);
  ASSERT_TRUE(server.ok());
  auto first = LocalClient::Connect(path_);
  ASSERT_TRUE((*first)->Attach(1).ok());
  EXPECT_EQ(*(*server)->WaitAttach(milliseconds(3000)), 1);
  first->reset();  // the application crashed
  auto second = LocalClient::Connect(path_);
  ASSERT_TRUE((*second)->Attach(2).ok());
  EXPECT_EQ(*(*server)->WaitAttach(milliseconds(3000)), 2);
  ASSERT_TRUE((*server)->SendAssignment({Role::kRestarted, 0, 2, 1}).ok());
  auto a = (*second)->WaitAssignment(milliseconds(3000));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->role, Role::kRestarted);
}

}  // namespace
}  // namespace rtft::control
