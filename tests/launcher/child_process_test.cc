// The keeper's report of its application's ending (launcher/keeper.h, docs/launcher.md "How an
// ending is seen"): the application holds its life pipe at descriptor 3; an ending it cannot come
// back from is reported before the tree is reaped, with the wait status the reaping gives; a
// process that closed the pipe and lives on is not reported as ending.
#include "launcher/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace rtft::launch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class ChildProcessTest : public ::testing::TestWithParam<IsolationPolicy> {
 protected:
  std::unique_ptr<ChildProcess> Start(const std::string& script) {
    ChildSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.isolation = GetParam();
    auto child = ChildProcess::Start(spec);
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(*child) : nullptr;
  }
  static bool WaitFor(const std::function<bool()>& pred, milliseconds limit = milliseconds(30000)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(milliseconds(2));
    }
    return true;
  }
  TempDir dir_;
};

TEST_P(ChildProcessTest, ApplicationHoldsItsLifePipeAtDescriptorThree) {
  auto child = Start("[ -p /proc/self/fd/3 ] && exit 7; exit 1");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_EQ(child->exited()->code(), 7) << "descriptor 3 of the application is not a pipe";
}

TEST_P(ChildProcessTest, KilledApplicationIsSeenEndingWithTheStatusTheReapingGives) {
  auto child = Start("kill -9 $$");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_TRUE(child->exited()->signaled());
  EXPECT_EQ(child->exited()->signal(), SIGKILL);
  const auto ending = child->exiting();
  ASSERT_TRUE(ending.has_value()) << "the ending was only seen at the reaping";
  EXPECT_EQ(ending->wait_status, child->exited()->wait_status);
  EXPECT_LE(ending->at, child->exited()->at);
}

TEST_P(ChildProcessTest, ExitCodeIsSeenEndingToo) {
  auto child = Start("exit 3");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_EQ(child->exited()->code(), 3);
  ASSERT_TRUE(child->exiting().has_value());
  EXPECT_EQ(child->exiting()->code(), 3);
}

TEST_P(ChildProcessTest, CleanExitIsLeftToTheReaping) {
  auto child = Start("exit 0");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_EQ(child->exited()->code(), 0);
  EXPECT_FALSE(child->exiting().has_value());
}

TEST_P(ChildProcessTest, ApplicationThatClosedItsLifePipeIsNotSeenEndingWhileItRuns) {
  const std::string marker = dir_.path() + "/closed";
  auto child = Start("exec 3>&-; : > " + marker + "; exec sleep 60");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }));
  // The hang-up came while it ran (before the marker); the kill comes after it.
  child->Kill();
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_EQ(child->exited()->signal(), SIGKILL);
  EXPECT_FALSE(child->exiting().has_value())
      << "a process that closed its life pipe and went on was reported ending";
}

TEST_P(ChildProcessTest, PipeHeldByTheApplicationsChildLeavesTheStatusToTheReaping) {
  // The application's child keeps descriptor 3: no hang-up until the tree is ended; the
  // application's status still comes at the reaping.
  auto child = Start("sleep 60 & kill -9 $$");
  ASSERT_TRUE(child);
  ASSERT_TRUE(WaitFor([&] { return child->exited().has_value(); }));
  EXPECT_EQ(child->exited()->signal(), SIGKILL);
  if (auto ending = child->exiting()) EXPECT_EQ(ending->wait_status, child->exited()->wait_status);
}

INSTANTIATE_TEST_SUITE_P(Isolations, ChildProcessTest,
                         ::testing::Values(IsolationPolicy::kAuto, IsolationPolicy::kProcessGroup),
                         [](const auto& info) {
                           return info.param == IsolationPolicy::kAuto
                                      ? std::string("Auto")
                                      : std::string("ProcessGroup");
                         });

}  // namespace
}  // namespace rtft::launch
