// Special files in place of checkpoint files: a FIFO as LATEST, MANIFEST.json or a rank file
// made every reader (and rtft-ckpt) wait forever for a writer that never comes; links and
// devices were opened and read too. Each is refused now, at once, with an error that says what
// the path is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint/read/reader.h"
#include "checkpoint_fixture.h"
#include "child_process.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::ChildResult;
using testing::MakeTensor;
using testing::RunInChild;

class SpecialFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 1, 1, {{{w_.desc}, {}}}).ok());
    rank_file_ = RankFilePath(dir_.path(), 1, 0);
  }

  // Puts a FIFO where `path` was.
  void MakeFifo(const std::string& path) {
    ASSERT_EQ(std::remove(path.c_str()), 0);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  }

  static void ExpectRefused(const ChildResult& r, const std::string& words) {
    ASSERT_TRUE(r.returned) << r.Describe();
    EXPECT_EQ(r.code, StatusCode::kDataLoss) << r.Describe();
    EXPECT_NE(r.message.find(words), std::string::npos) << r.Describe();
  }

  Status RestoreW() const {
    auto out = MakeTensor<float>("model/w", DType::kFloat32, {64}, std::vector<float>(64));
    return Restore(dir_.path(), {}, TensorProvider(out.desc));
  }

  TempDir dir_;
  testing::OwnedTensor<float> w_ =
      MakeTensor<float>("model/w", DType::kFloat32, {64}, std::vector<float>(64, 1.5f));
  std::string rank_file_;
};

TEST_F(SpecialFiles, FifoAsLatest) {
  MakeFifo(LatestPath(dir_.path()));
  const std::string dir = dir_.path();
  auto latest = RunInChild([&] { return LatestVersion(dir).status(); });
  ExpectRefused(latest, "is a FIFO, not a regular file");
  ExpectRefused(RunInChild([&] { return RestoreW(); }), "is a FIFO");
}

TEST_F(SpecialFiles, FifoAsGlobalManifest) {
  MakeFifo(GlobalManifestPath(dir_.path(), 1));
  const std::string dir = dir_.path();
  ExpectRefused(RunInChild([&] { return VerifyVersion(dir, 1); }), "is a FIFO");
  // Listing shows the version as incomplete instead of waiting.
  auto listed = RunInChild([&]() -> Status {
    auto versions = ListVersions(dir);
    if (!versions.ok()) return versions.status();
    if (versions->size() != 1 || (*versions)[0].complete)
      return Status::Internal("the version should be listed as incomplete");
    return Status::DataLoss("listed");
  });
  ExpectRefused(listed, "listed");
}

TEST_F(SpecialFiles, FifoAsRankFile) {
  MakeFifo(rank_file_);
  const std::string dir = dir_.path();
  ExpectRefused(RunInChild([&] { return VerifyVersion(dir, 1); }), "is a FIFO");
  ExpectRefused(RunInChild([&] { return RestoreW(); }), "is a FIFO");
  // The tools follow a link the user named, but still only to a regular file.
  const std::string path = rank_file_;
  ExpectRefused(RunInChild([&] {
                  auto io = CreateIoBackend({});
                  if (!io.ok()) return io.status();
                  return CheckpointFileReader::Open(path, io->get(), true).status();
                }),
                "is a FIFO");
}

TEST_F(SpecialFiles, LinksDirectoriesAndDevices) {
  // A link to an intact copy: still refused inside a checkpoint directory.
  const std::string copy = dir_.path() + "/copy.h5";
  ASSERT_EQ(std::rename(rank_file_.c_str(), copy.c_str()), 0);
  ASSERT_EQ(::symlink(copy.c_str(), rank_file_.c_str()), 0);
  const std::string dir = dir_.path(), path = rank_file_;
  ExpectRefused(RunInChild([&] { return VerifyVersion(dir, 1); }), "is a symbolic link");
  // The tools follow it (the user named it), and it reads.
  auto io = CreateIoBackend({});
  ASSERT_TRUE(io.ok());
  EXPECT_TRUE(CheckpointFileReader::Open(path, io->get(), true).ok());

  ASSERT_EQ(std::remove(rank_file_.c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", rank_file_.c_str()), 0);
  ExpectRefused(RunInChild([&] {
                  auto io = CreateIoBackend({});
                  if (!io.ok()) return io.status();
                  return CheckpointFileReader::Open(path, io->get(), true).status();
                }),
                "is a character device");

  ASSERT_EQ(std::remove(rank_file_.c_str()), 0);
  ASSERT_EQ(::mkdir(rank_file_.c_str(), 0755), 0);
  ExpectRefused(RunInChild([&] { return VerifyVersion(dir, 1); }), "is a directory");
}

}  // namespace
}  // namespace rtft
