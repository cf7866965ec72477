// Crash consistency: a real writer process is SIGKILLed at named phases of its checkpoint loop
// (core/fault_point.h): while capturing, after the skeleton, mid-flush, after the manifest,
// after the fsync, after the rename, after MANIFEST.json, after LATEST, while pruning. After
// every kill the version LATEST names must be complete and hold exactly that version's state,
// and it is exactly the last version the writer reported as persisted, or the one after it once
// LATEST had moved. The writer is then restarted on the same directory, so later rounds find the
// leftovers of earlier ones.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

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

// Runs the writer with stdout into `log` and RTFT_FAULT=`fault`; returns once it died at the
// fault point (it never ends on its own).
void RunUntilFault(const std::string& dir, uint64_t first, const std::string& log,
                   const std::string& fault, const std::string& fault_log) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::setenv("RTFT_FAULT", fault.c_str(), 1);
    ::setenv("RTFT_FAULT_LOG", fault_log.c_str(), 1);
    std::string first_s = std::to_string(first);
    ::execl(WriterPath().c_str(), "crash_writer", dir.c_str(), first_s.c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "writer exited with " << WEXITSTATUS(status) << " instead of dying at " << fault << " (is "
      << WriterPath() << " built?)";
  EXPECT_NE(ReadText(fault_log).find("fault " + fault.substr(0, fault.find('@'))),
            std::string::npos)
      << "the writer did not note fault point " << fault;
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

struct Phase {
  const char* point;
  bool latest_moved;  // LATEST names the version being written when the writer dies there
};

TEST(Crash, LatestIsAlwaysCompleteAfterSigkillAtEveryPhase) {
  const Phase phases[] = {
      {"ckpt.capture", false},          {"ckpt.skeleton", false}, {"ckpt.flush", false},
      {"ckpt.manifest_written", false}, {"ckpt.synced", false},   {"ckpt.renamed", false},
      {"ckpt.committed", false},        {"ckpt.latest", true},    {"ckpt.prune", true},
  };
  TempDir dir;
  const std::string log = dir.path() + "/writer.log";
  const std::string fault_log = dir.path() + "/fault.log";
  const std::string root = dir.path() + "/ckpt";
  uint64_t next = 1;
  for (const Phase& phase : phases) {
    // The first time the phase is reached, and the fifth: a later version, with older versions
    // (and pruning) on disk.
    for (int hit : {1, 5}) {
      const std::string fault = std::string(phase.point) + "@" + std::to_string(hit) + ":kill";
      SCOPED_TRACE(fault);
      std::remove(log.c_str());
      RunUntilFault(root, next, log, fault, fault_log);
      const uint64_t persisted = LastPersisted(log);
      std::string latest = ReadText(LatestPath(root));
      if (latest.empty()) {
        EXPECT_EQ(persisted, 0u) << "writer reported a persisted version but LATEST is missing";
        EXPECT_FALSE(phase.latest_moved);
        continue;
      }
      const uint64_t version = std::strtoull(latest.c_str(), nullptr, 10);
      if (persisted > 0 || phase.latest_moved) {
        const uint64_t expected =
            phase.latest_moved ? (persisted ? persisted : next - 1) + 1 : persisted;
        EXPECT_EQ(version, expected) << "persisted " << persisted;
      }
      ExpectVersionIntact(root, version);
      next = version + 100;  // the restarted writer goes on past anything left behind
    }
  }
}

}  // namespace
}  // namespace rtft
