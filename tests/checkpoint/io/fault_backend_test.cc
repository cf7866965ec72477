// Tests of the fault-injecting backend (wrapping posix) and of its spec parser.
#include "checkpoint/io/fault/fault_backend.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/io/io_test_util.h"

namespace rtft {
namespace {

uint64_t DiskSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : ~0ull;
}

class FaultBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("/var/tmp");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override {
    if (backend_ && !dir_.empty()) EXPECT_TRUE(backend_->RemoveAll(dir_).ok());
  }

  void Make(FaultSpec spec) {
    auto posix = CreateIoBackend({"posix", 16});
    ASSERT_TRUE(posix.ok());
    backend_ = CreateFaultBackend(std::move(posix).value(), std::move(spec), stats_);
  }

  std::unique_ptr<File> Open(const std::string& name, bool direct = false) {
    auto file = backend_->Open(dir_ + "/" + name, {OpenMode::kCreate, direct});
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? std::move(file).value() : nullptr;
  }

  // Three 4 KiB requests in one call.
  Status WriteThreeBlocks(File* file, AlignedBuffer* buf) {
    return file->Write({{0, buf->data(), kAlign},
                        {kAlign, buf->data() + kAlign, kAlign},
                        {2 * kAlign, buf->data() + 2 * kAlign, kAlign}});
  }

  std::string dir_;
  std::shared_ptr<FaultStats> stats_ = std::make_shared<FaultStats>();
  std::unique_ptr<IoBackend> backend_;
};

TEST_F(FaultBackendTest, EnospcAfterNBytesLeavesExactlyNBytes) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 10000;
  Make(spec);
  EXPECT_STREQ(backend_->name(), "fault+posix");
  auto file = Open("rank-0.h5");
  ASSERT_TRUE(file);
  AlignedBuffer buf(3 * kAlign);
  buf.Fill(3);
  Status s = WriteThreeBlocks(file.get(), &buf);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(file->path()), std::string::npos) << s;
  EXPECT_NE(s.message().find("offset 10000"), std::string::npos) << s;
  EXPECT_EQ(DiskSize(file->path()), 10000u);
  AlignedBuffer back(10000);
  ASSERT_TRUE(file->Read({{0, back.data(), 10000}}).ok());
  EXPECT_EQ(std::memcmp(back.data(), buf.data(), 10000), 0);
  EXPECT_EQ(stats_->bytes_written, 10000u);
  EXPECT_EQ(stats_->faults_injected, 1u);
  // The disk stays full: nothing more gets through, even one byte.
  EXPECT_EQ(file->Write({{10000, buf.data(), 1}}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DiskSize(file->path()), 10000u);
  EXPECT_EQ(stats_->faults_injected, 2u);
}

TEST_F(FaultBackendTest, WithoutPartialTheFailingRequestWritesNothing) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 10000;
  spec.partial = false;
  Make(spec);
  auto file = Open("rank-0.h5");
  ASSERT_TRUE(file);
  AlignedBuffer buf(3 * kAlign);
  EXPECT_EQ(WriteThreeBlocks(file.get(), &buf).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DiskSize(file->path()), 2 * kAlign);
}

TEST_F(FaultBackendTest, DirectShortWriteEndsOnABlock) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 10000;
  Make(spec);
  auto file = Open("rank-0.h5", true);
  ASSERT_TRUE(file);
  if (!file->direct()) GTEST_SKIP() << "O_DIRECT not granted in " << dir_;
  AlignedBuffer buf(3 * kAlign);
  EXPECT_EQ(WriteThreeBlocks(file.get(), &buf).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(DiskSize(file->path()), 2 * kAlign);
}

TEST_F(FaultBackendTest, ErrnoIsConfigurable) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 0;
  spec.error = EROFS;
  Make(spec);
  auto file = Open("rank-0.h5");
  ASSERT_TRUE(file);
  char byte = 1;
  Status s = file->Write({{0, &byte, 1}});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(DiskSize(file->path()), 0u);
}

TEST_F(FaultBackendTest, PathFilterLimitsFaultsToMatchingFiles) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 0;
  spec.fail_sync = true;
  spec.path_substring = "rank-1";
  Make(spec);
  auto rank0 = Open("rank-0.h5");
  auto rank1 = Open("rank-1.h5");
  ASSERT_TRUE(rank0 && rank1);
  AlignedBuffer buf(3 * kAlign);
  EXPECT_TRUE(WriteThreeBlocks(rank0.get(), &buf).ok());
  EXPECT_TRUE(rank0->Sync().ok());
  EXPECT_EQ(WriteThreeBlocks(rank1.get(), &buf).code(), StatusCode::kResourceExhausted);
  Status s = rank1->Sync();
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s;
  EXPECT_NE(s.message().find("rank-1.h5"), std::string::npos) << s;
  EXPECT_EQ(stats_->bytes_written, 3 * kAlign);
  EXPECT_EQ(stats_->matched_bytes_written, 0u);
  EXPECT_EQ(stats_->faults_injected, 2u);
}

TEST_F(FaultBackendTest, FailRenameAndSyncDir) {
  FaultSpec spec;
  spec.fail_rename = true;
  spec.fail_sync_dir = true;
  Make(spec);
  auto file = Open("rank-0.h5.tmp");
  ASSERT_TRUE(file);
  ASSERT_TRUE(file->Close().ok());
  EXPECT_EQ(backend_->Rename(dir_ + "/rank-0.h5.tmp", dir_ + "/rank-0.h5").code(),
            StatusCode::kIoError);
  EXPECT_EQ(DiskSize(dir_ + "/rank-0.h5.tmp"), 0u);  // still there, not moved
  EXPECT_EQ(backend_->SyncDir(dir_).code(), StatusCode::kIoError);
  EXPECT_EQ(stats_->faults_injected, 2u);
}

// The limit is one disk shared by every file: concurrent writers together stop at it.
TEST_F(FaultBackendTest, LimitIsSharedAcrossFilesAndThreads) {
  FaultSpec spec;
  spec.fail_writes_after_bytes = 100000;
  Make(spec);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      auto file = Open("rank-" + std::to_string(t) + ".h5");
      ASSERT_TRUE(file);
      AlignedBuffer buf(kAlign);
      for (uint64_t off = 0;; off += 1000) {
        if (!file->Write({{off, buf.data(), 1000}}).ok()) break;
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t total = 0;
  for (int t = 0; t < 4; ++t) total += DiskSize(dir_ + "/rank-" + std::to_string(t) + ".h5");
  EXPECT_EQ(total, 100000u);
  EXPECT_EQ(stats_->matched_bytes_written, 100000u);
  EXPECT_EQ(stats_->faults_injected, 4u);
}

TEST(ParseFaultSpec, GoodInputs) {
  auto spec = ParseFaultSpec("enospc_after=1M,fail_sync,path=rank-1");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fail_writes_after_bytes, 1 << 20);
  EXPECT_EQ(spec->error, ENOSPC);
  EXPECT_TRUE(spec->partial);
  EXPECT_TRUE(spec->fail_sync);
  EXPECT_FALSE(spec->fail_rename);
  EXPECT_EQ(spec->path_substring, "rank-1");

  spec = ParseFaultSpec("fail_writes_after=4096,errno=EIO,partial=0,fail_rename,fail_sync_dir");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fail_writes_after_bytes, 4096);
  EXPECT_EQ(spec->error, EIO);
  EXPECT_FALSE(spec->partial);
  EXPECT_TRUE(spec->fail_rename && spec->fail_sync_dir);
  EXPECT_EQ(ParseFaultSpec("errno=28")->error, ENOSPC);

  spec = ParseFaultSpec("");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->fail_writes_after_bytes, -1);
  EXPECT_FALSE(spec->fail_sync || spec->fail_rename || spec->fail_sync_dir);
}

TEST(ParseFaultSpec, BadInputs) {
  for (const char* bad :
       {"enospc_after=abc", "enospc_after=-1", "enospc_after=", "bogus", "bogus=1", "fail_sync=1",
        "path=", "errno=EFOO", "errno=0", "partial=yes", "enospc_after=1M;fail_sync"}) {
    auto spec = ParseFaultSpec(bad);
    EXPECT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << bad << ": " << spec.status();
  }
  EXPECT_EQ(ParseFaultSpec("enospc_after=9000000T").status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace rtft
