// CheckpointFileReader chunk by chunk: each chunk of a tensor reads back exactly its bytes, a
// damaged chunk is a DataLoss naming its index and byte range while its neighbours still read,
// and ReadTensor is the same check chunk after chunk.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint/read/reader.h"
#include "checkpoint_fixture.h"
#include "test_util.h"

namespace rtft {
namespace {

constexpr uint64_t kChunk = 4096;
constexpr size_t kValues = 3000;  // 12000 bytes: chunks of 4096, 4096 and 3808 bytes

class ChunkReader : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint32_t> values(kValues);
    for (size_t i = 0; i < kValues; ++i) values[i] = static_cast<uint32_t>(i * 2654435761u);
    t_ = testing::MakeTensor<uint32_t>("opt/v", DType::kInt32, {kValues}, std::move(values));
    testing::FixtureOptions options;
    options.chunk_bytes = kChunk;
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 1, 1, {{{t_.desc}, {}}}, options).ok());
    auto io = CreateIoBackend({});
    ASSERT_TRUE(io.ok()) << io.status();
    io_ = std::move(io).value();
    Open();
  }

  void Open() {
    auto reader = CheckpointFileReader::Open(RankFilePath(dir_.path(), 1, 0), io_.get());
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = std::move(reader).value();
    entry_ = reader_->manifest().FindTensor("opt/v");
    ASSERT_NE(entry_, nullptr);
  }

  // Flips byte `at` of the tensor's data in the file.
  void Flip(uint64_t at) {
    std::FILE* f = std::fopen(RankFilePath(dir_.path(), 1, 0).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(entry_->offset + at), SEEK_SET);
    const int old = std::fgetc(f);
    std::fseek(f, static_cast<long>(entry_->offset + at), SEEK_SET);
    std::fputc(old ^ 0xff, f);
    std::fclose(f);
  }

  const char* Saved() const { return reinterpret_cast<const char*>(t_.storage.data()); }

  TempDir dir_;
  testing::OwnedTensor<uint32_t> t_;
  std::unique_ptr<IoBackend> io_;
  std::unique_ptr<CheckpointFileReader> reader_;
  const TensorEntry* entry_ = nullptr;
};

TEST_F(ChunkReader, EachChunkReadsExactlyItsBytes) {
  EXPECT_EQ(reader_->chunk_bytes(), kChunk);
  EXPECT_EQ(reader_->ChunkSize(*entry_, 0), kChunk);
  EXPECT_EQ(reader_->ChunkSize(*entry_, 1), kChunk);
  EXPECT_EQ(reader_->ChunkSize(*entry_, 2), kValues * 4 - 2 * kChunk);
  for (uint64_t c = 0; c < 3; ++c) {
    const uint64_t size = reader_->ChunkSize(*entry_, c);
    // One guard byte past the chunk proves nothing is written beyond it.
    std::vector<char> got(size + 1, '\x5a');
    Status s = reader_->ReadTensorChunk(*entry_, c, got.data());
    ASSERT_TRUE(s.ok()) << "chunk " << c << ": " << s;
    EXPECT_EQ(std::vector<char>(got.begin(), got.end() - 1),
              std::vector<char>(Saved() + c * kChunk, Saved() + c * kChunk + size))
        << "chunk " << c;
    EXPECT_EQ(got.back(), '\x5a') << "chunk " << c;
  }
  std::vector<char> past(kChunk);
  Status s = reader_->ReadTensorChunk(*entry_, 3, past.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no chunk 3"), std::string::npos) << s;
}

TEST_F(ChunkReader, DamagedChunkIsReportedWithItsRange) {
  Flip(kChunk + 100);  // in chunk 1
  Open();
  std::vector<char> buffer(kChunk);
  EXPECT_TRUE(reader_->ReadTensorChunk(*entry_, 0, buffer.data()).ok());
  EXPECT_TRUE(reader_->ReadTensorChunk(*entry_, 2, buffer.data()).ok());
  Status s = reader_->ReadTensorChunk(*entry_, 1, buffer.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("tensor 'opt/v'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("chunk 1 (bytes 4096..8192)"), std::string::npos) << s;

  // Unverified, the damaged bytes come back as stored: exactly one byte differs.
  ASSERT_TRUE(reader_->ReadTensorChunk(*entry_, 1, buffer.data(), /*verify=*/false).ok());
  for (uint64_t i = 0; i < kChunk; ++i) {
    const char want = Saved()[kChunk + i] ^ (i == 100 ? '\xff' : '\0');
    ASSERT_EQ(buffer[i], want) << "byte " << i;
  }

  // ReadTensor is the same per-chunk check, so it fails with the same message.
  std::vector<char> whole(entry_->bytes);
  uint64_t reported = 0;
  Status all = reader_->ReadTensor(*entry_, whole.data(), true, [&](uint64_t n) { reported += n; });
  EXPECT_EQ(all.code(), StatusCode::kDataLoss) << all;
  EXPECT_EQ(all.message(), s.message());
  EXPECT_EQ(reported, kChunk);  // only chunk 0 was verified before the damage
}

TEST_F(ChunkReader, LastChunkDamageNamesTheShortRange) {
  Flip(kValues * 4 - 1);  // the last byte of the tensor
  Open();
  std::vector<char> buffer(kChunk);
  Status s = reader_->ReadTensorChunk(*entry_, 2, buffer.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("chunk 2 (bytes 8192..12000)"), std::string::npos) << s;
}

}  // namespace
}  // namespace rtft
