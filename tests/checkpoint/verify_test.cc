// VerifyVersion and the version listing: a good version verifies with progress that adds up; a
// damaged one fails with a DataLoss that says where.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::MakeTensor;
using testing::OwnedTensor;
using testing::RankState;

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 2; ++r) {
      std::vector<float> values(3000);
      for (size_t i = 0; i < values.size(); ++i) values[i] = r * 10000.0f + i;
      tensors_.push_back(MakeTensor<float>("opt/m", DType::kFloat32, {3000}, std::move(values),
                                           ShardCoords{{6000}, {r * 3000}}));
      states_.push_back({{tensors_.back().desc}, {{"step", "17"}}});
    }
    testing::FixtureOptions options;
    options.chunk_bytes = 4096;  // 3 chunks per tensor
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 5, 2, states_, options).ok());
  }

  // Flips one byte `at` bytes into tensor or object `name` of rank `rank`'s file.
  void Flip(int rank, const std::string& name, uint64_t at) {
    const std::string path = RankFilePath(dir_.path(), 5, rank);
    auto m = ReadFileManifest(path);
    ASSERT_TRUE(m.ok()) << m.status();
    uint64_t offset =
        m->FindTensor(name) ? m->FindTensor(name)->offset : m->FindObject(name)->offset;
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(offset + at), SEEK_SET);
    int c = std::fgetc(f);
    std::fseek(f, static_cast<long>(offset + at), SEEK_SET);
    std::fputc(c ^ 0x40, f);
    std::fclose(f);
  }

  TempDir dir_;
  std::vector<OwnedTensor<float>> tensors_;
  std::vector<RankState> states_;
};

TEST_F(VerifyTest, GoodVersionVerifiesWithProgress) {
  std::vector<VerifyProgress> seen;
  Status s = VerifyVersion(dir_.path(), 5, [&](const VerifyProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(seen.size(), 2u * (3 + 1));  // 3 chunks and one object per file
  const uint64_t total = 2 * (3000 * 4 + 2);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
  EXPECT_EQ(seen.back().bytes_done, total);
  EXPECT_EQ(seen.back().bytes_total, total);
  EXPECT_NE(seen.back().current.find("rank-0000"), std::string::npos);
}

TEST_F(VerifyTest, FlippedTensorByteNamesTensorFileAndChunk) {
  Flip(1, "opt/m", 5000);  // chunk 1 is bytes 4096..8192
  Status s = VerifyVersion(dir_.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("tensor 'opt/m'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("rank-00001.h5"), std::string::npos) << s;
  EXPECT_NE(s.message().find("chunk 1 (bytes 4096..8192)"), std::string::npos) << s;
}

TEST_F(VerifyTest, FlippedObjectByte) {
  Flip(0, "step", 1);
  Status s = VerifyVersion(dir_.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("object 'step'"), std::string::npos) << s;
}

TEST_F(VerifyTest, FileFromAnotherVersionIsCaught) {
  TempDir other;
  ASSERT_TRUE(testing::WriteVersion(other.path(), 5, 2, states_).ok());  // other chunk size
  ASSERT_EQ(std::rename(RankFilePath(other.path(), 5, 0).c_str(),
                        RankFilePath(dir_.path(), 5, 0).c_str()),
            0);
  Status s = VerifyVersion(dir_.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("rank-00000.h5"), std::string::npos) << s;
}

TEST_F(VerifyTest, MissingRankFile) {
  ASSERT_EQ(std::remove(RankFilePath(dir_.path(), 5, 1).c_str()), 0);
  Status s = VerifyVersion(dir_.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
}

TEST_F(VerifyTest, IncompleteOrAbsentVersion) {
  ASSERT_EQ(std::remove(GlobalManifestPath(dir_.path(), 5).c_str()), 0);
  Status s = VerifyVersion(dir_.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("incomplete"), std::string::npos) << s;
  EXPECT_EQ(VerifyVersion(dir_.path(), 6).code(), StatusCode::kNotFound);
}

TEST_F(VerifyTest, ListAndLatest) {
  testing::FixtureOptions unfinished;
  unfinished.write_global_manifest = false;
  ASSERT_TRUE(testing::WriteVersion(dir_.path(), 6, 2, states_, unfinished).ok());
  ::mkdir((dir_.path() + "/not-a-version").c_str(), 0755);
  ::mkdir((dir_.path() + "/v12").c_str(), 0755);
  ASSERT_TRUE(testing::WriteVersion(dir_.path(), 3, 2, states_, {1 << 20, true, false}).ok());

  auto versions = ListVersions(dir_.path());
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 3u);
  EXPECT_EQ((*versions)[0].version, 3u);
  EXPECT_TRUE((*versions)[0].complete);
  EXPECT_EQ((*versions)[1].version, 5u);
  EXPECT_EQ((*versions)[1].world_size, 2);
  EXPECT_EQ((*versions)[2].version, 6u);
  EXPECT_FALSE((*versions)[2].complete);
  EXPECT_EQ((*versions)[2].path, VersionDir(dir_.path(), 6));

  auto latest = LatestVersion(dir_.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 5u);
}

}  // namespace
}  // namespace rtft
