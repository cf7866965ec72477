// The engine against the file system and the other ranks: versions whose flushes finish out of
// order, a full disk, a read-only file system and a failing fsync (a fault-injecting I/O
// backend, and a real read-only tmpfs), the commit across ranks, the marks a version's manifests
// record, a version written again, and an abandoned engine. Runs once per I/O backend, as
// engine_test.cc.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "checkpoint/engine.h"
#include "checkpoint/io/fault/fault_backend.h"
#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/layout/naming.h"
#include "engine_test_state.h"
#include "engine_test_util.h"
#include "test_util.h"

namespace rtft {
namespace {

// Versions finish out of order when their flushes overlap: here version 1's only tensor write is
// held until version 2 is persisted. LATEST must not go back to 1 when 1 commits last, and the
// pruning after version 2's commit must not delete version 1 while it is still being written
// (both happened now and then on a loaded machine).
TEST(Engine, VersionsFinishingOutOfOrderNeverMoveLatestBack) {
  TempDir dir;
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  FaultSpec spec;
  spec.path_substring = VersionDirName(1) + "/";
  spec.before_write = [&](const std::string&, bool direct) {
    if (!direct) return;  // HDF5's own writes (the file thread) go on
    std::unique_lock<std::mutex> lock(mu);
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  CheckpointOptions o = SmallOptions(dir.path());
  o.keep_versions = 1;
  auto engine =
      CreateCheckpointEngine(o, CreateFaultBackend(*CreateIoBackend({TestIo(), 16}), spec));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<float> one = Iota(16384, 1), two = Iota(16384, 2);  // 64 KiB: one unit each
  TensorProvider first(HostTensor("w", &one)), second(HostTensor("w", &two));
  ASSERT_TRUE((*engine)->Checkpoint(1, first).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return held; }))
      GTEST_SKIP() << "no O_DIRECT write to hold here (the file system refuses O_DIRECT)";
  }
  ASSERT_TRUE((*engine)->Checkpoint(2, second).ok());
  ASSERT_TRUE((*engine)->WaitPersisted(2).ok());
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "2\n");
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  Status first_persisted = (*engine)->WaitPersisted(1);
  EXPECT_TRUE(first_persisted.ok()) << first_persisted;
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "2\n");
  EXPECT_TRUE(VerifyVersion(dir.path(), 2).ok());
  EXPECT_EQ(StoredBytes(RankFilePath(dir.path(), 2, 0), "w").size(), two.size() * 4);
}

// Disk full in the middle of a flush: the version fails with a clear error, leaves no file
// under its final name, and the previous version stays the committed one.
TEST(Engine, DiskFullMidFlushKeepsThePreviousVersion) {
  TempDir dir;
  FaultSpec spec;
  spec.fail_writes_after_bytes = 1500000;  // the first version (~1.3 MB) fits, the second does not
  spec.path_substring = ".h5";
  auto io = CreateFaultBackend(*CreateIoBackend({TestIo(), 16}), spec);
  auto engine = CreateCheckpointEngine(SmallOptions(dir.path()), std::move(io));
  ASSERT_TRUE(engine.ok()) << engine.status();
  TrainState s;
  ASSERT_TRUE((*engine)->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE((*engine)->WaitPersisted(1).ok());
  ASSERT_TRUE((*engine)->Checkpoint(2, s.provider).ok());
  Status failed = (*engine)->WaitPersisted(2);
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed;
  EXPECT_NE(failed.message().find("version 2"), std::string::npos) << failed;
  EXPECT_EQ((*engine)->PollError().code(), StatusCode::kResourceExhausted);
  // Let the failed version's cleanup finish before looking at the directory.
  engine->reset();
  EXPECT_FALSE(Exists(RankFilePath(dir.path(), 2, 0)));
  EXPECT_FALSE(Exists(TempPath(RankFilePath(dir.path(), 2, 0))));
  EXPECT_FALSE(Exists(GlobalManifestPath(dir.path(), 2)));
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "1\n");
  std::vector<char> big = StoredBytes(RankFilePath(dir.path(), 1, 0), "model/big");
  ASSERT_EQ(big.size(), s.big.size() * 4);
  EXPECT_EQ(std::memcmp(big.data(), s.big.data(), big.size()), 0);
}

TEST(Engine, ReadOnlyFileSystemAndFailingFsync) {
  for (const char* text : {"fail_writes_after=0,errno=EROFS,path=.h5", "fail_sync,path=rank-"}) {
    TempDir dir;
    auto spec = ParseFaultSpec(text);
    ASSERT_TRUE(spec.ok());
    auto engine = CreateCheckpointEngine(
        SmallOptions(dir.path()), CreateFaultBackend(*CreateIoBackend({TestIo(), 16}), *spec));
    ASSERT_TRUE(engine.ok()) << engine.status();
    TrainState s;
    ASSERT_TRUE((*engine)->Checkpoint(1, s.provider).ok());
    Status st = (*engine)->WaitPersisted(1);
    EXPECT_FALSE(st.ok()) << text;
    if (std::string(text).find("EROFS") != std::string::npos)
      EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st;
    engine->reset();
    EXPECT_FALSE(Exists(LatestPath(dir.path()))) << text;
    EXPECT_FALSE(Exists(RankFilePath(dir.path(), 1, 0))) << text;
  }
}

// A real read-only file system (a tmpfs remounted read-only; needs root): the engine refuses to
// start on it, and a file system that turns read-only mid-run fails the next version cleanly
// while the committed one stays loadable.
TEST(Engine, RealReadOnlyFileSystem) {
  TempDir dir;
  const std::string mnt = dir.path() + "/fs";
  ::mkdir(mnt.c_str(), 0755);
  if (::geteuid() != 0 || std::system(("mount -t tmpfs -o size=64m tmpfs " + mnt).c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  struct Unmount {
    std::string path;
    ~Unmount() { (void)std::system(("umount " + path).c_str()); }
  } unmount{mnt};
  auto engine = MakeEngine(SmallOptions(mnt));
  ASSERT_TRUE(engine);
  TrainState s;
  ASSERT_TRUE(engine->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(engine->WaitPersisted(1).ok());
  // The engine holds no descriptor on a finished version, so the remount goes through (a flush
  // thread may take a moment to let go of its last one).
  bool remounted = false;
  for (int i = 0; i < 50 && !remounted; ++i) {
    remounted = std::system(("mount -o remount,ro " + mnt + " 2>/dev/null").c_str()) == 0;
    if (!remounted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(remounted) << "a file on " << mnt << " is still open for writing";
  ASSERT_TRUE(engine->Checkpoint(2, s.provider).ok());
  Status st = engine->WaitPersisted(2);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st;
  EXPECT_NE(st.message().find("Read-only file system"), std::string::npos) << st;
  engine.reset();
  EXPECT_EQ(ReadText(LatestPath(mnt)), "1\n");
  std::vector<char> big = StoredBytes(RankFilePath(mnt, 1, 0), "model/big");
  ASSERT_EQ(big.size(), s.big.size() * 4);
  EXPECT_EQ(std::memcmp(big.data(), s.big.data(), big.size()), 0);
  Status refused = CheckpointEngine::Create(SmallOptions(mnt + "/new")).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
}

TEST(Engine, CommitWaitsForEveryRank) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.commit_timeout = std::chrono::milliseconds(300);
  auto [r0, r1] = MakeTwoRanks(o);
  ASSERT_TRUE(r0 && r1);
  TrainState s;
  // Rank 1 saves version 1 only: version 1 commits, version 2 times out on rank 0.
  ASSERT_TRUE(r0->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(r1->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(r1->WaitPersisted(1).ok());
  ASSERT_TRUE(r0->WaitPersisted(1).ok());
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "1\n");
  ASSERT_TRUE(r0->Checkpoint(2, s.provider).ok());
  Status st = r0->WaitPersisted(2);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st;
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "1\n");
  EXPECT_FALSE(Exists(GlobalManifestPath(dir.path(), 2)));
}

// Each rank's marks go into its file's manifest; the version's are what both files have
// (docs/format.md, "Certification"), read back by ListVersions.
TEST(Engine, VersionMarksReachTheManifests) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.keep_versions = 0;  // all three stay
  auto [r0, r1] = MakeTwoRanks(o);
  ASSERT_TRUE(r0 && r1);
  TrainState s;
  const VersionMarks agreed{true, true, false};
  // Version 1: both ranks' copies agreed. Version 2: rank 1 wrote without marks. Version 3: no
  // marks at all; `agreed` without `checked` is not kept.
  ASSERT_TRUE(r0->Checkpoint(1, s.provider, agreed).ok());
  ASSERT_TRUE(r1->Checkpoint(1, s.provider, agreed).ok());
  ASSERT_TRUE(r0->Checkpoint(2, s.provider, agreed).ok());
  ASSERT_TRUE(r1->Checkpoint(2, s.provider).ok());
  ASSERT_TRUE(r0->Checkpoint(3, s.provider, VersionMarks{false, true, false}).ok());
  ASSERT_TRUE(r1->Checkpoint(3, s.provider).ok());
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(r1->WaitPersisted(v).ok());
    ASSERT_TRUE(r0->WaitPersisted(v).ok());
  }
  auto versions = ListVersions(dir.path());
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 3u);
  EXPECT_TRUE((*versions)[0].marks.checked && (*versions)[0].marks.agreed);
  EXPECT_FALSE((*versions)[0].marks.replayed);
  EXPECT_FALSE((*versions)[1].marks.checked || (*versions)[1].marks.agreed);
  EXPECT_FALSE((*versions)[2].marks.checked || (*versions)[2].marks.agreed);
  // The global manifest has the field only where something is marked.
  auto global = ReadText(GlobalManifestPath(dir.path(), 1));
  EXPECT_NE(global.find("\"certified\""), std::string::npos) << global;
  EXPECT_EQ(ReadText(GlobalManifestPath(dir.path(), 3)).find("certified"), std::string::npos);
}

// A version written again (a job that went back to an older step writes it once more) commits
// only the files of its own write (docs/format.md, "Commit protocol"): a rank's file of the same
// version that an earlier write left is waited past, never taken with this write's.
TEST(Engine, AVersionWrittenAgainCommitsOnlyTheFilesOfItsOwnWrite) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.keep_versions = 0;
  TrainState s;
  const auto write = [&](uint64_t id, bool rank1, std::chrono::milliseconds timeout) {
    o.write_id = id;
    o.commit_timeout = timeout;
    auto [r0, r1] = MakeTwoRanks(o);
    EXPECT_TRUE(r0 && r1);
    EXPECT_TRUE(r0->Checkpoint(5, s.provider).ok());
    if (rank1) {
      EXPECT_TRUE(r1->Checkpoint(5, s.provider).ok());
      EXPECT_TRUE(r1->WaitPersisted(5).ok());
    }
    return r0->WaitPersisted(5);
  };
  const auto write_of = [&](int rank) {
    auto json = ReadFileManifestJson(RankFilePath(dir.path(), 5, rank));
    EXPECT_TRUE(json.ok()) << json.status();
    auto m = FileManifest::FromJson(json.ok() ? *json : "");
    return m.ok() ? m->write_id : 0;
  };
  ASSERT_TRUE(write(1, true, std::chrono::seconds(60)).ok());
  ASSERT_EQ(write_of(1), 1u);
  // Written again by rank 0 only: rank 1's file is the first write's, and the commit does not
  // take it (it would commit at once); it ends at its deadline, saying why.
  s.big[0] = -1;
  Status st = write(2, false, std::chrono::milliseconds(500));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("from another write of the version (write 1, this one's 2)"),
            std::string::npos)
      << st;
  EXPECT_EQ(write_of(0), 2u);
  EXPECT_EQ(write_of(1), 1u);
  // Written again by both: committed, every file of the version from this write, and the global
  // manifest names these files (each file's manifest checksum is the one on disk).
  ASSERT_TRUE(write(3, true, std::chrono::seconds(60)).ok());
  EXPECT_EQ(write_of(0), 3u);
  EXPECT_EQ(write_of(1), 3u);
  auto verified = VerifyVersion(dir.path(), 5);
  EXPECT_TRUE(verified.ok()) << verified;
}

TEST(Engine, AnAbandonedCommitEndsAtOnceNotAtItsTimeout) {
  // Rank 1 never writes version 1 (it was lost). Rank 0's commit would wait an hour; abandoned,
  // it ends now with kAborted, nothing is committed, and the engine is destroyed without waiting.
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.world_size = 2;
  o.commit_timeout = std::chrono::hours(1);
  auto r0 = MakeEngine(o);
  ASSERT_TRUE(r0);
  TrainState s;
  ASSERT_TRUE(r0->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(r0->WaitCaptured(1).ok());
  r0->Abandon();
  Status st = r0->WaitPersisted(1, std::chrono::minutes(5));
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("abandoned"), std::string::npos) << st;
  EXPECT_FALSE(Exists(LatestPath(dir.path())));
  EXPECT_FALSE(Exists(GlobalManifestPath(dir.path(), 1)));
  r0.reset();
}

// An abandoned engine still commits a version whose files are all there, but prunes nothing any
// more: the recovery that abandoned it may restore any version on disk (a retired L3 engine's
// commits pruned the version a faulty device's rollback had chosen: protect_replay_job_test).
TEST(Engine, AnAbandonedEngineCommitsButPrunesNothing) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.keep_versions = 1;
  auto [r0, r1] = MakeTwoRanks(o);
  ASSERT_TRUE(r0 && r1);
  TrainState s;
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(r1->Checkpoint(v, s.provider).ok());
    ASSERT_TRUE(r1->WaitPersisted(v).ok());
  }
  ASSERT_TRUE(r0->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(r0->WaitPersisted(1).ok());
  r0->Abandon();
  for (uint64_t v = 2; v <= 3; ++v) {
    ASSERT_TRUE(r0->Checkpoint(v, s.provider).ok());
    const Status persisted = r0->WaitPersisted(v);
    EXPECT_TRUE(persisted.ok()) << persisted;
  }
  r0.reset();
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "3\n");
  for (uint64_t v = 1; v <= 3; ++v) {
    const Status verified = VerifyVersion(dir.path(), v);
    EXPECT_TRUE(verified.ok()) << "version " << v << ": " << verified;
  }
}

}  // namespace
}  // namespace rtft
