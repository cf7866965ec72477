// A real full disk: a small tmpfs, filled so that only F bytes are left, for F from a few KiB to
// past one version's size. At every F, the writer process either commits the new version or
// fails it with a clear error, and then exits normally (HDF5 used to crash at exit, closing again
// a file whose close had failed); no file under a final name is unreadable (a rank file with an
// all-NUL manifest used to be renamed into place now and then); LATEST always names a version
// that verifies. Needs root for mount(2); skips itself otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "engine_test_util.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

// About 1.1 MB of tensors in 70 datasets, and an object.
struct SmallState {
  std::vector<float> big = Iota(250000, 1);
  std::vector<std::vector<float>> small;
  CompositeProvider provider{/*small_tensor_bytes=*/8192, /*group_bytes=*/64 << 10};
  SmallState() {
    provider.AddTensor(HostTensor("model/big", &big));
    for (int i = 0; i < 64; ++i) small.push_back(Iota(200, static_cast<float>(i)));
    for (int i = 0; i < 64; ++i)
      provider.AddTensor(HostTensor("model/small" + std::to_string(i), &small[i]));
    provider.AddObject(
        {"rng", [] { return StatusOr<std::string>(std::string(3000, 'r')); }, nullptr});
  }
};

// Checkpoints `version` in a child process that ends with exit(), so that HDF5's exit handlers
// run as in a real application. Returns the child's exit code: 0 persisted, 1 failed cleanly;
// anything else (a signal) is a crash.
int WriteVersionInChild(const std::string& root, uint64_t version, std::string* error) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    CheckpointOptions o;
    o.dir = root;
    o.pool_bytes = 512 << 10;
    o.chunk_bytes = 64 << 10;
    o.io_backend = "posix";
    Status s;
    {
      auto engine = CheckpointEngine::Create(o);
      SmallState state;
      s = engine.ok() ? (*engine)->Checkpoint(version, state.provider) : engine.status();
      if (s.ok()) s = (*engine)->WaitPersisted(version);
    }
    const std::string text = s.ToString();
    (void)!::write(fds[1], text.data(), text.size());
    std::exit(s.ok() ? 0 : 1);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) error->append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// Leaves about `free` bytes of the file system free with a filler file.
bool FillLeaving(const std::string& mount, uint64_t free) {
  const std::string filler = mount + "/filler";
  std::remove(filler.c_str());
  const uint64_t available = FreeBytes(mount);
  if (available <= free) return true;
  int fd = ::open(filler.c_str(), O_CREAT | O_WRONLY, 0644);
  if (fd < 0) return false;
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(available - free));
  ::close(fd);
  return rc == 0;
}

// Runs `argv` with `env` added, stderr into `error`; returns the exit code, 128 + signal.
int RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               std::string* error) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::close(fds[0]);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) error->append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Every rank file under its final name reads and every complete version verifies.
void ExpectNoDamagedFile(const std::string& root) {
  std::error_code ec;
  for (const auto& v : std::filesystem::directory_iterator(root, ec)) {
    uint64_t version;
    if (!ParseVersionDirName(v.path().filename().string(), &version)) continue;
    for (const auto& f : std::filesystem::directory_iterator(v.path(), ec)) {
      int rank;
      if (!ParseRankFileName(f.path().filename().string(), &rank)) continue;
      auto m = ReadFileManifest(f.path().string());
      EXPECT_TRUE(m.ok()) << f.path()
                          << " is under its final name but does not read: " << m.status();
    }
    if (std::filesystem::exists(GlobalManifestPath(root, version), ec)) {
      Status s = VerifyVersion(root, version);
      EXPECT_TRUE(s.ok()) << "complete version " << version << " does not verify: " << s;
    }
  }
}

// Every rank file under its final name reads; LATEST names a version that verifies, and it is
// `expected_latest`.
void ExpectConsistent(const std::string& root, uint64_t expected_latest) {
  ExpectNoDamagedFile(root);
  auto latest = LatestVersion(root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, expected_latest);
  EXPECT_TRUE(VerifyVersion(root, *latest).ok());
}

class FullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  }
  // A tmpfs of `bytes` on the test's directory; false (and the test skipped) where mounting is
  // not allowed.
  bool Mount(uint64_t bytes) {
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, options.c_str()) != 0) return false;
    mounted_ = true;
    return true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }

  TempDir dir_;
  bool mounted_ = false;
};

TEST_F(FullDisk, EveryAmountOfFreeSpaceLeavesAConsistentDirectory) {
  if (!Mount(8 << 20)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const std::string root = dir_.path() + "/ckpt";
  int committed = 0, failed = 0;
  for (uint64_t free = 0; free <= (1600 << 10); free += free < (64 << 10) ? 4096 : (40 << 10)) {
    SCOPED_TRACE("free bytes: " + std::to_string(free));
    std::filesystem::remove_all(root);
    std::remove((dir_.path() + "/filler").c_str());
    std::string error;
    ASSERT_EQ(WriteVersionInChild(root, 1, &error), 0) << error;
    ASSERT_TRUE(FillLeaving(dir_.path(), free));
    error.clear();
    const int rc = WriteVersionInChild(root, 2, &error);
    ASSERT_TRUE(rc == 0 || rc == 1) << "the writer crashed (exit " << rc << "): " << error;
    if (rc == 0) {
      ++committed;
      ExpectConsistent(root, 2);
    } else {
      ++failed;
      EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
      ExpectConsistent(root, 1);
    }
    if (::testing::Test::HasFailure()) break;
  }
  // The sweep crossed from "no room" to "room for the version".
  EXPECT_GT(failed, 0);
  EXPECT_GT(committed, 0);
}

// The demo, as a user runs it, on a disk with F bytes free: it ends with 0 (trained, restored,
// identical) or 1 and a message. It used to die of SIGSEGV when the disk was full from the start:
// WaitCaptured returned the file's error while copies of its state were still running, the demo
// returned and freed the state under them.
TEST_F(FullDisk, TheDemoFailsCleanlyAtEveryAmountOfFreeSpace) {
  const char* bin = std::getenv("RTFT_TEST_BIN_DIR");
  const std::string demo = std::string(bin ? bin : ".") + "/example-01-checkpoint";
  if (::access(demo.c_str(), X_OK) != 0) GTEST_SKIP() << demo << " is not built";
  if (!Mount(32 << 20)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const std::string root = dir_.path() + "/demo";
  // Two versions of 7 MB, captured in 256 KiB units by 4 threads: copies run for milliseconds,
  // long after a full disk failed the version.
  const std::vector<std::string> argv = {
      demo,     "--dir",   root, "--layers", "1", "--params-per-layer",
      "524288", "--steps", "4",  "--every",  "2"};
  const std::vector<std::string> env = {"RTFT_CKPT_POOL_BYTES=16M", "RTFT_CKPT_CHUNK_BYTES=256K"};
  int completed = 0, failed = 0;
  for (uint64_t free = 0; free <= (18 << 20); free += free < (64 << 10) ? 8192 : (2 << 20)) {
    SCOPED_TRACE("free bytes: " + std::to_string(free));
    std::filesystem::remove_all(root);
    ASSERT_TRUE(FillLeaving(dir_.path(), free));
    std::string error;
    const int rc = RunProgram(argv, env, &error);
    ASSERT_TRUE(rc == 0 || rc == 1) << "the demo crashed (exit " << rc << "): " << error;
    (rc == 0 ? completed : failed)++;
    if (rc == 1) EXPECT_NE(error.find("example-01-checkpoint: "), std::string::npos) << error;
    ExpectNoDamagedFile(root);
    auto latest = LatestVersion(root);
    if (latest.ok()) EXPECT_TRUE(VerifyVersion(root, *latest).ok());
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(completed, 0);
}

}  // namespace
}  // namespace rtft
