// Bad input on the read side: flipped bytes, truncated files, files that are not checkpoints, a
// newer format, missing directories, damaged LATEST. Each one is a Status with a clear message.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint/read/reader.h"
#include "checkpoint_fixture.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::MakeTensor;

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 1, 1, {{{w_.desc, b_.desc}, {}}}).ok());
    path_ = RankFilePath(dir_.path(), 1, 0);
  }

  Status RestoreW() {
    auto out = MakeTensor<float>("model/w", DType::kFloat32, {100, 50}, std::vector<float>(5000));
    return Restore(dir_.path(), {}, TensorProvider(out.desc));
  }

  TempDir dir_;
  testing::OwnedTensor<float> w_ =
      MakeTensor<float>("model/w", DType::kFloat32, {100, 50}, std::vector<float>(5000, 1.5f));
  testing::OwnedTensor<float> b_ =
      MakeTensor<float>("model/b", DType::kFloat32, {50}, std::vector<float>(50, 2.0f));
  std::string path_;
};

TEST_F(Corruption, FlippedByteInTensorData) {
  auto m = ReadFileManifest(path_);
  ASSERT_TRUE(m.ok());
  std::FILE* f = std::fopen(path_.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, static_cast<long>(m->FindTensor("model/w")->offset + 777), SEEK_SET);
  std::fputc(0xff, f);
  std::fclose(f);
  Status s = RestoreW();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("tensor 'model/w'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s;
  // Without verification the (damaged) bytes are taken as they are.
  auto out = MakeTensor<float>("model/w", DType::kFloat32, {100, 50}, std::vector<float>(5000));
  RestoreOptions trusting;
  trusting.verify_checksums = false;
  EXPECT_TRUE(Restore(dir_.path(), trusting, TensorProvider(out.desc)).ok());
}

TEST_F(Corruption, TruncatedFile) {
  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  for (off_t size : {st.st_size - 1, st.st_size / 2, off_t{100}}) {
    ASSERT_EQ(::truncate(path_.c_str(), size), 0);
    Status s = RestoreW();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << size << ": " << s;
    EXPECT_EQ(VerifyVersion(dir_.path(), 1).code(), StatusCode::kDataLoss);
  }
}

TEST_F(Corruption, TextFileIsNotACheckpoint) {
  std::ofstream(path_, std::ios::trunc) << "this is not a checkpoint\n";
  Status s = RestoreW();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not an rt-ft checkpoint"), std::string::npos) << s;
  auto io = CreateIoBackend({});
  ASSERT_TRUE(io.ok());
  auto reader = CheckpointFileReader::Open(path_, io->get());
  EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(Corruption, NewerFormatAsksForAnUpgrade) {
  hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t attr = H5Aopen(file, kFormatVersionAttribute, H5P_DEFAULT);
  int newer = kFormatVersion + 1;
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT, &newer), 0);
  H5Aclose(attr);
  H5Fclose(file);
  Status s = RestoreW();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("upgrade"), std::string::npos) << s;
  EXPECT_EQ(VerifyVersion(dir_.path(), 1).code(), StatusCode::kUnimplemented);
}

// The root attribute and the manifest state the same format version; a file where they differ
// was altered after rt-ft wrote it, in either direction.
TEST_F(Corruption, FormatVersionsOfAttributeAndManifestMustAgree) {
  auto set_attribute = [](const std::string& path, int version) {
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hid_t attr = H5Aopen(file, kFormatVersionAttribute, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT, &version), 0);
    H5Aclose(attr);
    H5Fclose(file);
  };
  auto io = CreateIoBackend({});
  ASSERT_TRUE(io.ok());
  set_attribute(path_, 2);  // a float32 file, manifest version 1
  auto reader = CheckpointFileReader::Open(path_, io->get());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status();
  EXPECT_NE(reader.status().message().find("root attribute says format version 2, its manifest 1"),
            std::string::npos)
      << reader.status();
  EXPECT_EQ(RestoreW().code(), StatusCode::kDataLoss);

  auto u = MakeTensor<double>("solver/u", DType::kFloat64, {8}, testing::HardDoubles(8, 5));
  ASSERT_TRUE(testing::WriteVersion(dir_.path(), 2, 1, {{{u.desc}, {}}}).ok());
  const std::string f64 = RankFilePath(dir_.path(), 2, 0);
  ASSERT_TRUE(CheckpointFileReader::Open(f64, io->get()).ok());
  set_attribute(f64, 1);  // what an older reader would accept, over a version-2 manifest
  reader = CheckpointFileReader::Open(f64, io->get());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status();
  EXPECT_NE(reader.status().message().find("root attribute says format version 1, its manifest 2"),
            std::string::npos)
      << reader.status();
}

TEST_F(Corruption, MissingDirectory) {
  const std::string missing = dir_.path() + "/nowhere";
  Status s = Restore(missing, {}, TensorProvider(w_.desc));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
  EXPECT_EQ(ListVersions(missing).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LatestVersion(missing).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(VerifyVersion(missing, 1).code(), StatusCode::kNotFound);
}

TEST_F(Corruption, DamagedLatest) {
  std::ofstream(LatestPath(dir_.path()), std::ios::trunc) << "banana";
  auto latest = LatestVersion(dir_.path());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(latest.status().message().find("6 bytes are not a decimal version number"),
            std::string::npos)
      << latest.status();
  EXPECT_EQ(RestoreW().code(), StatusCode::kDataLoss);

  std::ofstream(LatestPath(dir_.path()), std::ios::trunc) << "1\n";
  EXPECT_TRUE(LatestVersion(dir_.path()).ok());

  ASSERT_TRUE(testing::WriteVersion(dir_.path(), 2, 1, {{{w_.desc}, {}}}).ok());
  ASSERT_EQ(std::remove(GlobalManifestPath(dir_.path(), 2).c_str()), 0);
  latest = LatestVersion(dir_.path());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(latest.status().message().find("incomplete"), std::string::npos) << latest.status();

  ASSERT_EQ(std::remove(LatestPath(dir_.path()).c_str()), 0);
  EXPECT_EQ(LatestVersion(dir_.path()).status().code(), StatusCode::kNotFound);
}

// LATEST may be a link planted by someone else: the error must not show the bytes of the file it
// points to.
TEST_F(Corruption, LatestLinkedToAnotherFileShowsNoneOfItsBytes) {
  const std::string secret = dir_.path() + "/secret.txt";
  std::ofstream(secret) << "password=hunter2\n";
  ASSERT_EQ(std::remove(LatestPath(dir_.path()).c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), LatestPath(dir_.path()).c_str()), 0);
  auto latest = LatestVersion(dir_.path());
  EXPECT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().message().find("hunter2"), std::string::npos) << latest.status();
  EXPECT_EQ(latest.status().message().find("password"), std::string::npos) << latest.status();
}

// A version whose MANIFEST.json claims no ranks at all is not a version that verifies.
TEST_F(Corruption, GlobalManifestOfNoRanksIsRefused) {
  GlobalManifest empty;
  empty.version = 1;
  empty.world_size = 0;
  std::ofstream(GlobalManifestPath(dir_.path(), 1), std::ios::trunc) << empty.ToJson();
  Status s = VerifyVersion(dir_.path(), 1);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("world_size"), std::string::npos) << s;
  EXPECT_EQ(RestoreW().code(), StatusCode::kDataLoss);
}

TEST_F(Corruption, DamagedGlobalManifest) {
  std::ofstream(GlobalManifestPath(dir_.path(), 1), std::ios::trunc) << "{\"format\": ";
  Status s = VerifyVersion(dir_.path(), 1);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("MANIFEST.json"), std::string::npos) << s;
  auto versions = ListVersions(dir_.path());
  ASSERT_TRUE(versions.ok());
  ASSERT_EQ(versions->size(), 1u);
  EXPECT_FALSE((*versions)[0].complete);
}

// MANIFEST.json holds the newest format of its files, so that a reader too old for one of them
// refuses the version before it reads any file. One that claims less was rewritten: refused.
TEST_F(Corruption, GlobalManifestOlderThanItsFloat64FileIsRefused) {
  auto u = MakeTensor<double>("solver/u", DType::kFloat64, {64}, testing::HardDoubles(64, 3));
  ASSERT_TRUE(testing::WriteVersion(dir_.path(), 2, 1, {{{u.desc}, {}}}).ok());
  auto out = MakeTensor<double>("solver/u", DType::kFloat64, {64}, std::vector<double>(64));
  ASSERT_TRUE(Restore(dir_.path(), {}, TensorProvider(out.desc)).ok());
  const std::string path = GlobalManifestPath(dir_.path(), 2);
  std::ifstream in(path);
  auto global = GlobalManifest::FromJson(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(global->format_version, 2);
  global->format_version = 1;
  std::ofstream(path, std::ios::trunc) << global->ToJson();
  Status s = VerifyVersion(dir_.path(), 2);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("format version 2, newer than its version's MANIFEST.json (1)"),
            std::string::npos)
      << s;
  EXPECT_EQ(Restore(dir_.path(), {}, TensorProvider(out.desc)).code(), StatusCode::kDataLoss);
  // Version 1 of the fixture (float32 only) is still format version 1 throughout.
  auto m = ReadFileManifest(path_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format_version, 1);
}

}  // namespace
}  // namespace rtft
