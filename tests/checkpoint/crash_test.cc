// Crash consistency: a real writer process is SIGKILLed at random moments of its checkpoint
// loop (capture, flush, finalize, commit, pruning); after every kill the version LATEST names
// must be complete and hold exactly that version's state, and it must be at least the last
// version the writer reported as persisted. The writer is then restarted on the same directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "checkpoint/layout/naming.h"
#include "crash_state.h"
#include "engine_test_util.h"
#include "test_util.h"

namespace rtft {
namespace {

std::string WriterPath() {
  const char* dir = std::getenv("RTFT_TEST_BIN_DIR");
  return std::string(dir ? dir : ".") + "/../tests/crash_writer";
}

// Runs the writer with stdout into `log` and kills it after `delay`.
void RunAndKill(const std::string& dir, uint64_t first, const std::string& log,
                std::chrono::milliseconds delay) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDOUT_FILENO);
    std::string first_s = std::to_string(first);
    ::execl(WriterPath().c_str(), "crash_writer", dir.c_str(), first_s.c_str(), nullptr);
    ::_exit(127);
  }
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited on its own with " << WEXITSTATUS(status)
                                   << " (is " << WriterPath() << " built?)";
}

uint64_t LastPersisted(const std::string& log) {
  std::istringstream in(ReadText(log));
  std::string word;
  uint64_t v = 0, last = 0;
  while (in >> word >> v)
    if (word == "persisted") last = v;
  return last;
}

void ExpectVersionIntact(const std::string& dir, uint64_t version) {
  const std::string file = RankFilePath(dir, version, 0);
  auto m = ReadFileManifest(file);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(ReadText(GlobalManifestPath(dir, version)).size() > 0);
  CrashState expected;
  expected.Fill(version);
  std::vector<char> big = StoredBytes(file, "big");
  ASSERT_EQ(big.size(), expected.big.size() * 4);
  EXPECT_EQ(std::memcmp(big.data(), expected.big.data(), big.size()), 0) << "version " << version;
  for (size_t t = 0; t < expected.small.size(); ++t) {
    std::vector<char> s = StoredBytes(file, "small/" + std::to_string(t));
    ASSERT_EQ(s.size(), expected.small[t].size() * 4);
    ASSERT_EQ(std::memcmp(s.data(), expected.small[t].data(), s.size()), 0)
        << "version " << version;
  }
  // Chunk checksums agree with the bytes.
  const TensorEntry* e = m->FindTensor("big");
  ASSERT_NE(e, nullptr);
  for (size_t c = 0; c < e->xxh3.size(); ++c) {
    size_t begin = c * m->chunk_bytes, n = std::min<size_t>(m->chunk_bytes, big.size() - begin);
    EXPECT_EQ(e->xxh3[c], Xxh3(big.data() + begin, n));
  }
}

TEST(Crash, LatestIsAlwaysCompleteAfterSigkill) {
  TempDir dir;
  const std::string log = dir.path() + "/writer.log";
  const std::string root = dir.path() + "/ckpt";
  std::mt19937 rng(12345);
  uint64_t next = 1;
  int committed_checks = 0;
  for (int round = 0; round < 12; ++round) {
    auto delay = std::chrono::milliseconds(40 + rng() % 400);
    RunAndKill(root, next, log, delay);
    const uint64_t persisted = LastPersisted(log);
    std::string latest = ReadText(LatestPath(root));
    if (latest.empty()) {
      EXPECT_EQ(persisted, 0u) << "writer reported a persisted version but LATEST is missing";
      continue;
    }
    const uint64_t version = std::strtoull(latest.c_str(), nullptr, 10);
    EXPECT_GE(version, persisted);
    ExpectVersionIntact(root, version);
    ++committed_checks;
    next = version + 100;  // the restarted writer goes on past anything left behind
  }
  EXPECT_GE(committed_checks, 6) << "too few kills happened after a commit to prove anything";
}

}  // namespace
}  // namespace rtft
