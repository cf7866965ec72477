#include "checkpoint/engine.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "checkpoint/io/fault/fault_backend.h"
#include "checkpoint/layout/naming.h"
#include "engine_test_state.h"
#include "engine_test_util.h"
#include "rtft/testing.h"
#include "test_util.h"

namespace rtft {
namespace {

TEST(Engine, SavesEveryByteAndCommits) {
  TempDir dir;
  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  TrainState s;
  ASSERT_TRUE(engine->Checkpoint(7, s.provider).ok());
  ASSERT_TRUE(engine->WaitCaptured(7).ok());
  Status persisted = engine->WaitPersisted(7);
  ASSERT_TRUE(persisted.ok()) << persisted;

  const std::string file = RankFilePath(dir.path(), 7, 0);
  ASSERT_TRUE(Exists(file));
  EXPECT_FALSE(Exists(TempPath(file)));
  EXPECT_TRUE(Exists(GlobalManifestPath(dir.path(), 7)));
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "7\n");

  std::vector<char> big = StoredBytes(file, "model/big");
  ASSERT_EQ(big.size(), s.big.size() * 4);
  EXPECT_EQ(std::memcmp(big.data(), s.big.data(), big.size()), 0);
  for (int i = 0; i < 50; ++i) {
    std::vector<char> b = StoredBytes(file, "model/small" + std::to_string(i));
    ASSERT_EQ(b.size(), s.small[i].size() * 4) << i;
    EXPECT_EQ(std::memcmp(b.data(), s.small[i].data(), b.size()), 0) << i;
  }
  std::vector<char> bf = StoredBytes(file, "opt/bf16");
  ASSERT_EQ(bf.size(), 777u * 2);
  EXPECT_EQ(std::memcmp(bf.data(), s.bf16.data(), bf.size()), 0);

  auto m = ReadFileManifest(file);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tensors.size(), 53u);
  const TensorEntry* e = m->FindTensor("model/big");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->xxh3.size(), ChunkCount(e->bytes, 64 << 10));
  for (size_t c = 0; c < e->xxh3.size(); ++c) {
    size_t begin = c * (64 << 10), n = std::min<size_t>(64 << 10, big.size() - begin);
    EXPECT_EQ(e->xxh3[c], Xxh3(big.data() + begin, n)) << "chunk " << c;
  }
  EXPECT_EQ(e->offset % 4096, 0u);
  ASSERT_NE(m->FindObject("step"), nullptr);
  EXPECT_EQ(m->FindObject("step")->bytes, 2u);
  EXPECT_EQ(m->FindObject("rng")->bytes, 5000u);

  auto stats = engine->Stats(7);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(
      stats->tensor_bytes, s.big.size() * 4 + 777 * 2 + [&] {
        size_t n = 0;
        for (auto& v : s.small) n += v.size() * 4;
        return n;
      }());
  EXPECT_GT(stats->persist_s, 0);
  // Where the file system grants O_DIRECT, the tensor bytes went through it.
  auto io = CreateIoBackend({TestIo(), 16});
  ASSERT_TRUE(io.ok());
  auto probe = (*io)->Open(dir.path() + "/probe", OpenOptions{OpenMode::kCreate, true});
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(stats->direct_io, (*probe)->direct());
  EXPECT_LE(stats->capture_s, stats->persist_s);
}

TEST(Engine, StateWithoutTensorBytes) {
  // Only objects and an empty tensor: no capture units at all, still a complete version.
  TempDir dir;
  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  std::vector<float> none;
  CompositeProvider p(1024, 4096);
  TensorDesc empty = HostTensor("empty", &none);
  empty.data = nullptr;
  p.AddTensor(empty);
  p.AddObject({"note", [] { return StatusOr<std::string>(std::string("hello")); }, nullptr});
  ASSERT_TRUE(engine->Checkpoint(3, p).ok());
  ASSERT_TRUE(engine->WaitPersisted(3).ok());
  auto m = ReadFileManifest(RankFilePath(dir.path(), 3, 0));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->tensors.size(), 1u);
  EXPECT_EQ(m->tensors[0].bytes, 0u);
  ASSERT_NE(m->FindObject("note"), nullptr);
  EXPECT_EQ(m->FindObject("note")->bytes, 5u);
  // A failing serializer fails the call itself, before anything is queued.
  CompositeProvider bad(1024, 4096);
  bad.AddObject(
      {"broken", [] { return StatusOr<std::string>(Status::Internal("boom")); }, nullptr});
  Status st = engine->Checkpoint(4, bad);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("broken"), std::string::npos);
}

TEST(Engine, CapturedStateIsASnapshot) {
  // After WaitCaptured the caller may update its state; the file holds the state as it was.
  TempDir dir;
  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  TrainState s;
  const std::vector<float> before = s.big;
  ASSERT_TRUE(engine->Checkpoint(1, s.provider).ok());
  ASSERT_TRUE(engine->WaitCaptured(1).ok());
  for (float& x : s.big) x = -1;
  s.step = 99;
  ASSERT_TRUE(engine->WaitPersisted(1).ok());
  std::vector<char> big = StoredBytes(RankFilePath(dir.path(), 1, 0), "model/big");
  ASSERT_EQ(big.size(), before.size() * 4);
  EXPECT_EQ(std::memcmp(big.data(), before.data(), big.size()), 0);
}

TEST(Engine, ManyVersionsInFlightAndPruning) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.keep_versions = 2;
  auto engine = MakeEngine(o);
  ASSERT_TRUE(engine);
  TrainState s;
  for (uint64_t v = 1; v <= 5; ++v) {
    ASSERT_TRUE(engine->Checkpoint(v, s.provider).ok());
    ASSERT_TRUE(engine->WaitCaptured(v).ok());
  }
  for (uint64_t v = 1; v <= 5; ++v) ASSERT_TRUE(engine->WaitPersisted(v).ok()) << v;
  EXPECT_EQ(ReadText(LatestPath(dir.path())), "5\n");
  EXPECT_TRUE(Exists(VersionDir(dir.path(), 5)));
  EXPECT_TRUE(Exists(VersionDir(dir.path(), 4)));
  EXPECT_FALSE(Exists(VersionDir(dir.path(), 3)));
  EXPECT_FALSE(Exists(VersionDir(dir.path(), 1)));
}

TEST(Engine, RejectsBadCallsAndOptions) {
  TempDir dir;
  CheckpointOptions o = SmallOptions(dir.path());
  o.chunk_bytes = 5000;
  EXPECT_EQ(CheckpointEngine::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(dir.path());
  o.pool_bytes = 4096;
  Status pool = CheckpointEngine::Create(o).status();
  EXPECT_EQ(pool.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pool.message().find("RTFT_CKPT_POOL_BYTES"), std::string::npos);
  o = SmallOptions("");
  EXPECT_EQ(CheckpointEngine::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(dir.path());
  o.rank = 2;
  o.world_size = 2;
  EXPECT_EQ(CheckpointEngine::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions("/proc/rtft-cannot-be-here");
  EXPECT_FALSE(CheckpointEngine::Create(o).ok());

  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  TrainState s;
  ASSERT_TRUE(engine->Checkpoint(5, s.provider).ok());
  Status again = engine->Checkpoint(5, s.provider);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("increase"), std::string::npos);
  EXPECT_EQ(engine->WaitCaptured(6).code(), StatusCode::kNotFound);
  std::vector<float> x(4);
  CompositeProvider dup(1024, 4096);
  dup.AddTensor(HostTensor("a", &x));
  dup.AddTensor(HostTensor("a", &x));
  EXPECT_EQ(engine->Checkpoint(6, dup).code(), StatusCode::kInvalidArgument);
  TensorDesc dev = HostTensor("d", &x);
  dev.memory = MemoryKind::kDevice;
  TensorProvider device_tensor(dev);
  // Host memory described as device memory is refused at the call: without a GPU because there
  // is no device, with one because the pointer is not device memory.
  EXPECT_FALSE(engine->Checkpoint(7, device_tensor).ok());
  ASSERT_TRUE(engine->WaitPersisted(5).ok());
}

// An exception thrown inside any background thread (here by the I/O backend, as a third-party
// library might) fails that version with kInternal instead of ending the process, leaves no file
// under the final name, and the engine goes on with the next version.
TEST(Engine, ExceptionsInBackgroundThreadsBecomeErrors) {
  struct Case {
    const char* where;
    FaultSpec spec;
  };
  std::vector<Case> cases(4);
  cases[0].where = "flush thread";  // tensor writes, after the skeleton's ~20 KB
  cases[0].spec.fail_writes_after_bytes = 200000;
  cases[0].spec.path_substring = ".h5";
  cases.back().where = "HDF5 driver";  // the skeleton, written by HDF5 on the file thread
  cases.back().spec.fail_writes_after_bytes = 0;
  cases.back().spec.path_substring = ".h5";
  cases[1].where = "file thread";  // the rank file's rename
  cases[1].spec.fail_rename = true;
  cases[1].spec.path_substring = ".h5";
  cases[2].where = "commit thread";  // MANIFEST.json
  cases[2].spec.fail_writes_after_bytes = 0;
  cases[2].spec.path_substring = "MANIFEST.json";
  for (Case& c : cases) {
    SCOPED_TRACE(c.where);
    TempDir dir;
    c.spec.throw_instead = true;
    auto stats = std::make_shared<FaultStats>();
    auto io = CreateFaultBackend(*CreateIoBackend({TestIo(), 16}), c.spec, stats);
    auto engine = CreateCheckpointEngine(SmallOptions(dir.path()), std::move(io));
    ASSERT_TRUE(engine.ok()) << engine.status();
    TrainState s;
    ASSERT_TRUE((*engine)->Checkpoint(1, s.provider).ok());
    Status failed = (*engine)->WaitPersisted(1);
    EXPECT_EQ(failed.code(), StatusCode::kInternal) << failed;
    const std::string where = c.where;
    EXPECT_NE(failed.message().find(where == "HDF5 driver" ? "uncaught exception in the HDF5 driver"
                                                           : "the checkpoint engine's " + where +
                                                                 " ended by an exception"),
              std::string::npos)
        << failed;
    EXPECT_GT(stats->faults_injected.load(), 0u);
    if (std::string(c.where) != "commit thread")
      EXPECT_FALSE(Exists(RankFilePath(dir.path(), 1, 0)));
    EXPECT_FALSE(Exists(GlobalManifestPath(dir.path(), 1)));
    EXPECT_FALSE(Exists(LatestPath(dir.path())));
    // The engine still serves: the next version fails the same way, it does not hang.
    ASSERT_TRUE((*engine)->Checkpoint(2, s.provider).ok());
    EXPECT_EQ((*engine)->WaitPersisted(2).code(), StatusCode::kInternal);
  }
}

// A tensor the next compute changes (a module's buffers: changed_in_compute) is copied inside
// Checkpoint(); the others are copied by the capture thread, which is held here until the caller
// has changed both: the file holds the marked tensor as it was at the call, the other as it was
// after (which shows that the thread did copy late). Both a tensor of its own and one among
// coalesced small tensors.
TEST(Engine, TensorsChangedInComputeAreCopiedInsideTheCall) {
  TempDir dir;
  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  std::vector<float> stats = Iota(20000, 1), small = Iota(10, 5), plain = Iota(20000, 3);
  CompositeProvider provider{/*small_tensor_bytes=*/8192, /*group_bytes=*/64 << 10};
  TensorDesc running = HostTensor("bn/running_mean", &stats);
  running.changed_in_compute = true;
  TensorDesc count = HostTensor("bn/small", &small);
  count.changed_in_compute = true;
  provider.AddTensor(running);
  provider.AddTensor(count);
  provider.AddTensor(HostTensor("plain", &plain));
  const std::vector<float> stats_at_call = stats, small_at_call = small;
  const std::string go = dir.path() + "/go";
  ArmFaults(("ckpt.capture_begin:wait=" + go).c_str());
  ASSERT_TRUE(engine->Checkpoint(1, provider).ok());
  for (float& x : stats) x = -1;  // forward updates the buffers
  for (float& x : small) x = -2;
  for (float& x : plain) x = -3;  // against the contract: copied after the change
  std::ofstream(go).close();
  Status captured = engine->WaitCaptured(1);
  ArmFaults("");
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_TRUE(engine->WaitPersisted(1).ok());
  auto stored = [&](const std::string& name) {
    std::vector<char> b = StoredBytes(RankFilePath(dir.path(), 1, 0), name);
    std::vector<float> f(b.size() / 4);
    std::memcpy(f.data(), b.data(), f.size() * 4);
    return f;
  };
  EXPECT_EQ(stored("bn/running_mean"), stats_at_call);
  EXPECT_EQ(stored("bn/small"), small_at_call);
  EXPECT_EQ(stored("plain"), plain);
  StatusOr<CheckpointStats> st = engine->Stats(1);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->early_bytes, (stats.size() + small.size()) * 4);
  EXPECT_TRUE(VerifyVersion(dir.path(), 1).ok());
}

// A name that is not UTF-8 text used to reach the flush thread, where the JSON writer threw and
// ended the process (std::terminate). It is refused at the call now, like every other bad name.
TEST(Engine, NamesThatAreNotUtf8TextAreRefusedAtTheCall) {
  TempDir dir;
  auto engine = MakeEngine(SmallOptions(dir.path()));
  ASSERT_TRUE(engine);
  std::vector<float> x(4, 1.0f);
  for (const std::string& name :
       {std::string("w\xff"), std::string("w\xc3"), std::string("\xed\xa0\x80"),
        std::string("\xc0\xaf"), std::string("a\nb"), std::string("a\0b", 3)}) {
    TensorProvider bad(HostTensor(name, &x));
    Status s = engine->Checkpoint(1, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("UTF-8"), std::string::npos) << s;
  }
  TensorProvider good(HostTensor("w/\xc3\xa9t\xc3\xa9", &x));  // "w/été"
  ASSERT_TRUE(engine->Checkpoint(2, good).ok());
  ASSERT_TRUE(engine->WaitPersisted(2).ok());
  EXPECT_TRUE(engine->PollError().ok());
}

}  // namespace
}  // namespace rtft
