// Tests of the I/O backends: posix and uring run the same cases; the fault backend wraps posix.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/io/io_test_util.h"

namespace rtft {
namespace {

constexpr long kTmpfsMagic = 0x01021994;

std::unique_ptr<File> OpenOrDie(IoBackend* backend, const std::string& path, OpenMode mode,
                                bool direct) {
  auto file = backend->Open(path, {mode, direct});
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(file).value() : nullptr;
}

class IoBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    IoBackendOptions options;
    options.kind = GetParam();
    auto backend = CreateIoBackend(options);
    if (!backend.ok() && backend.status().code() == StatusCode::kUnimplemented) {
      GTEST_SKIP() << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(backend).value();
    ASSERT_STREQ(backend_->name(), GetParam().c_str());
    dir_ = MakeTempDir("/var/tmp");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override {
    if (backend_ && !dir_.empty()) EXPECT_TRUE(backend_->RemoveAll(dir_).ok());
  }

  std::unique_ptr<IoBackend> backend_;
  std::string dir_;
};

// Writes `count` blocks of `block` bytes with direct I/O (in shuffled order, all in one call so
// the uring backend keeps many in flight), then reads them back in larger pieces.
void WriteAndReadBack(IoBackend* backend, const std::string& dir, size_t block, int count) {
  const std::string path = dir + "/data.bin";
  AlignedBuffer src(block * count);
  src.Fill(7);
  auto file = OpenOrDie(backend, path, OpenMode::kCreate, true);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->direct(), KernelGrantsDirect(dir));
  std::vector<IoRequest> writes;
  for (int i = 0; i < count; ++i) writes.push_back({i * block, src.data() + i * block, block});
  std::shuffle(writes.begin(), writes.end(), std::mt19937(count));
  ASSERT_TRUE(file->Write(writes).ok());
  ASSERT_TRUE(file->Sync().ok());
  ASSERT_TRUE(file->Close().ok());

  AlignedBuffer dst(block * count);
  file = OpenOrDie(backend, path, OpenMode::kReadOnly, true);
  ASSERT_TRUE(file);
  EXPECT_EQ(*file->Size(), block * count);
  std::vector<IoRequest> reads;
  for (size_t off = 0; off < dst.size(); off += 4 * block) {
    reads.push_back({off, dst.data() + off, std::min(4 * block, dst.size() - off)});
  }
  ASSERT_TRUE(file->Read(reads).ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
}

TEST_P(IoBackendTest, DirectWritesManyInFlightReadBackExactly) {
  WriteAndReadBack(backend_.get(), dir_, 64 * 1024, 63);
}

TEST_P(IoBackendTest, TmpfsFallsBackToBufferedOrGetsDirect) {
  struct statfs fs;
  if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != kTmpfsMagic) GTEST_SKIP() << "no tmpfs";
  std::string shm = MakeTempDir("/dev/shm");
  ASSERT_FALSE(shm.empty());
  // Linux 6.6 and later let tmpfs accept O_DIRECT; older kernels refuse it with EINVAL and the
  // backend must fall back. Either way direct() must say what was granted and data must survive.
  if (KernelGrantsDirect(shm)) {
    std::cout << "note: this kernel's tmpfs accepts O_DIRECT; the fallback is not exercised\n";
  }
  WriteAndReadBack(backend_.get(), shm, kAlign, 9);
  EXPECT_TRUE(backend_->RemoveAll(shm).ok());
}

TEST_P(IoBackendTest, BufferedUnalignedWritesWork) {
  const std::string path = dir_ + "/buffered.bin";
  std::string text = "hello, checkpoint";
  auto file = OpenOrDie(backend_.get(), path, OpenMode::kCreate, false);
  ASSERT_TRUE(file);
  EXPECT_FALSE(file->direct());
  ASSERT_TRUE(file->Write({{3, text.data(), text.size()}, {0, text.data(), 3}}).ok());
  std::string back(text.size() + 3, '\0');
  ASSERT_TRUE(file->Read({{0, back.data(), back.size()}}).ok());
  EXPECT_EQ(back, "hel" + text);
}

// RLIMIT_FSIZE makes the kernel cut a write short at the limit and fail the next one with EFBIG:
// a real short write, as a disk filling up produces, without filling a disk.
TEST_P(IoBackendTest, ShortWriteIsContinuedThenItsErrorReported) {
  const std::string path = dir_ + "/limited.bin";
  auto file = OpenOrDie(backend_.get(), path, OpenMode::kCreate, false);
  ASSERT_TRUE(file);
  AlignedBuffer buf(3 * kAlign);
  buf.Fill(5);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 10000;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  Status s = file->Write({{0, buf.data(), 3 * kAlign}});
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s;  // EFBIG
  EXPECT_NE(s.message().find("at offset 10000"), std::string::npos) << s;
  EXPECT_EQ(*file->Size(), 10000u);
  AlignedBuffer back(10000);
  ASSERT_TRUE(file->Read({{0, back.data(), 10000}}).ok());
  EXPECT_EQ(std::memcmp(back.data(), buf.data(), 10000), 0);
}

TEST_P(IoBackendTest, UnalignedDirectRequestIsInvalidArgument) {
  auto file = OpenOrDie(backend_.get(), dir_ + "/direct.bin", OpenMode::kCreate, true);
  ASSERT_TRUE(file);
  if (!file->direct()) GTEST_SKIP() << "O_DIRECT not granted in " << dir_;
  AlignedBuffer buf(2 * kAlign);
  for (IoRequest bad : {IoRequest{100, buf.data(), kAlign}, IoRequest{0, buf.data(), 100},
                        IoRequest{0, buf.data() + 1, kAlign}}) {
    Status s = file->Write({{kAlign, buf.data(), kAlign}, bad});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(file->path()), std::string::npos) << s;
  }
  EXPECT_EQ(*file->Size(), 0u);  // checked before any byte moved
}

TEST_P(IoBackendTest, ReadPastEndOfFileIsDataLoss) {
  const std::string path = dir_ + "/short.bin";
  AlignedBuffer buf(2 * kAlign);
  buf.Fill(1);
  auto file = OpenOrDie(backend_.get(), path, OpenMode::kCreate, true);
  ASSERT_TRUE(file);
  ASSERT_TRUE(file->Write({{0, buf.data(), kAlign}}).ok());
  for (IoRequest r :
       {IoRequest{0, buf.data(), 2 * kAlign}, IoRequest{kAlign, buf.data(), kAlign}}) {
    Status s = file->Read({r});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  }
}

TEST_P(IoBackendTest, OpenMissingIsNotFound) {
  for (OpenMode mode : {OpenMode::kReadOnly, OpenMode::kReadWrite}) {
    auto file = backend_->Open(dir_ + "/missing.bin", {mode, true});
    EXPECT_EQ(file.status().code(), StatusCode::kNotFound) << file.status();
    EXPECT_NE(file.status().message().find("missing.bin"), std::string::npos);
  }
  auto file = backend_->Open(dir_ + "/no/such/dir/f.bin", {OpenMode::kCreate, false});
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound) << file.status();
}

TEST_P(IoBackendTest, ReadOnlyDirectoryIsPermissionDenied) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "running as root: permission bits do not stop root, and no read-only file "
                    "system is mounted here; FaultBackend.ErrnoIsConfigurable covers EROFS";
  }
  const std::string ro = dir_ + "/ro";
  ASSERT_TRUE(backend_->CreateDirs(ro).ok());
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  auto file = backend_->Open(ro + "/f.bin", {OpenMode::kCreate, false});
  EXPECT_EQ(file.status().code(), StatusCode::kPermissionDenied) << file.status();
  ASSERT_EQ(::chmod(ro.c_str(), 0755), 0);
}

TEST_P(IoBackendTest, RenameAndSyncDirCommitAFile) {
  const std::string tmp = dir_ + "/rank-0.h5.tmp";
  const std::string final_path = dir_ + "/rank-0.h5";
  std::string text = "committed";
  auto file = OpenOrDie(backend_.get(), tmp, OpenMode::kCreate, false);
  ASSERT_TRUE(file);
  ASSERT_TRUE(file->Write({{0, text.data(), text.size()}}).ok());
  ASSERT_TRUE(file->Sync().ok());
  ASSERT_TRUE(file->Close().ok());
  ASSERT_TRUE(backend_->Rename(tmp, final_path).ok());
  ASSERT_TRUE(backend_->SyncDir(dir_).ok());
  EXPECT_EQ(backend_->Open(tmp, {}).status().code(), StatusCode::kNotFound);
  file = OpenOrDie(backend_.get(), final_path, OpenMode::kReadOnly, false);
  ASSERT_TRUE(file);
  std::string back(text.size(), '\0');
  ASSERT_TRUE(file->Read({{0, back.data(), back.size()}}).ok());
  EXPECT_EQ(back, text);

  EXPECT_EQ(backend_->Rename(tmp, final_path).code(), StatusCode::kNotFound);
  Status s = backend_->SyncDir(dir_ + "/nope");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("nope"), std::string::npos);
}

TEST_P(IoBackendTest, CreateDirsRemoveAndRemoveAll) {
  const std::string deep = dir_ + "/a/b/c";
  ASSERT_TRUE(backend_->CreateDirs(deep).ok());
  ASSERT_TRUE(backend_->CreateDirs(deep).ok());  // exists: fine, as mkdir -p
  auto file = OpenOrDie(backend_.get(), deep + "/f", OpenMode::kCreate, false);
  ASSERT_TRUE(file);
  EXPECT_FALSE(backend_->CreateDirs(deep + "/f").ok());  // a file is in the way
  EXPECT_FALSE(backend_->CreateDirs(deep + "/f/g").ok());
  ASSERT_TRUE(backend_->Remove(deep + "/f").ok());
  EXPECT_EQ(backend_->Remove(deep + "/f").code(), StatusCode::kNotFound);
  ASSERT_TRUE(OpenOrDie(backend_.get(), deep + "/g", OpenMode::kCreate, false));
  ASSERT_TRUE(backend_->RemoveAll(dir_ + "/a").ok());
  EXPECT_EQ(::access((dir_ + "/a").c_str(), F_OK), -1);
  EXPECT_TRUE(backend_->RemoveAll(dir_ + "/a").ok());  // absent: fine, as rm -rf
}

TEST_P(IoBackendTest, CloseIsIdempotentAndEndsUse) {
  auto file = OpenOrDie(backend_.get(), dir_ + "/c.bin", OpenMode::kCreate, false);
  ASSERT_TRUE(file);
  EXPECT_TRUE(file->Close().ok());
  EXPECT_TRUE(file->Close().ok());
  char byte = 0;
  EXPECT_EQ(file->Write({{0, &byte, 1}}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(file->Sync().code(), StatusCode::kFailedPrecondition);
}

// Several files, each used by its own thread, as the flush threads do.
TEST_P(IoBackendTest, FilesInSeveralThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      std::string sub = dir_ + "/t" + std::to_string(t);
      ASSERT_TRUE(backend_->CreateDirs(sub).ok());
      WriteAndReadBack(backend_.get(), sub, 16 * 1024, 31);
    });
  }
  for (auto& th : threads) th.join();
}

INSTANTIATE_TEST_SUITE_P(Backends, IoBackendTest, ::testing::Values("posix", "uring"),
                         [](const auto& info) { return info.param; });

TEST(CreateIoBackend, KindsAndOptions) {
  auto bogus = CreateIoBackend({"bogus", 16});
  EXPECT_EQ(bogus.status().code(), StatusCode::kInvalidArgument);
  auto chosen = CreateIoBackend({"auto", 16});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  std::string name = (*chosen)->name();
  EXPECT_TRUE(name == "uring" || name == "posix") << name;
  auto uring = CreateIoBackend({"uring", 16});
  EXPECT_EQ(name == "uring", uring.ok()) << uring.status();
  if (uring.ok()) {
    EXPECT_EQ(CreateIoBackend({"uring", 0}).status().code(), StatusCode::kInvalidArgument);
    // Depth 1: every request waits for the one before; partial progress must still add up.
    auto one = CreateIoBackend({"uring", 1});
    ASSERT_TRUE(one.ok());
    std::string dir = MakeTempDir("/var/tmp");
    WriteAndReadBack(one->get(), dir, kAlign, 5);
    EXPECT_TRUE((*one)->RemoveAll(dir).ok());
  }
}

}  // namespace
}  // namespace rtft
