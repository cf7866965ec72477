// DeviceStaging on host memory, with a fake copier whose "device" is host memory and whose copies
// happen only when their ticket is waited for (the latest an asynchronous copy may land): the
// tensor arrives exactly, copies hold whole chunks and leave in order, a half of the buffer is
// never refilled while its copy is pending (the reader thread refills one half while the other
// is checked and copied), and a damaged chunk stops the stream with every copy waited for.
#include "checkpoint/read/device_staging.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"
#include "test_util.h"

namespace rtft {
namespace {

struct FakeCopier : DeviceCopier {
  struct Copy {
    uint64_t dst_offset;
    std::vector<char> snapshot;  // the source as it was when the copy was enqueued
    const char* src;
    size_t bytes;
  };

  class Ticket : public CopyTicket {
   public:
    Ticket(FakeCopier* owner, Copy copy) : owner_(owner), copy_(std::move(copy)) {}
    ~Ticket() override {
      std::lock_guard<std::mutex> lock(owner_->mu);
      owner_->unwaited += waited_ ? 0 : 1;
    }
    // Waited for by Stream's reader thread, while its other thread starts copies.
    Status Wait() override {
      std::lock_guard<std::mutex> lock(owner_->mu);
      if (!waited_) {
        // Refilled before the copy completed: the device would get the wrong bytes.
        if (std::memcmp(copy_.snapshot.data(), copy_.src, copy_.bytes) != 0) ++owner_->clobbered;
        std::memcpy(owner_->device + copy_.dst_offset, copy_.src, copy_.bytes);
        --owner_->pending;
      }
      waited_ = true;
      return Status::Ok();
    }

   private:
    FakeCopier* owner_;
    Copy copy_;
    bool waited_ = false;
  };

  Status After(const void*) override { return Status::Ok(); }
  StatusOr<std::unique_ptr<CopyTicket>> CopyToHost(const std::vector<CopyPiece>&) override {
    return Status::Unimplemented("restore only");
  }
  Status CopyToDevice(void*, const void*, size_t) override {
    return Status::Unimplemented("streamed copies are asynchronous");
  }
  StatusOr<std::unique_ptr<CopyTicket>> CopyToDeviceAsync(void* dst, const void* src,
                                                          size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    const char* from = static_cast<const char*>(src);
    Copy copy{static_cast<uint64_t>(static_cast<char*>(dst) - device),
              std::vector<char>(from, from + bytes), from, bytes};
    sizes.push_back(bytes);
    max_pending = std::max(max_pending, ++pending);
    return std::unique_ptr<CopyTicket>(new Ticket(this, std::move(copy)));
  }

  std::mutex mu;
  char* device = nullptr;
  std::vector<size_t> sizes;
  int pending = 0, max_pending = 0, clobbered = 0, unwaited = 0;
};

class Staging : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int32_t> values(2112);  // 8448 bytes: nine 1 KiB chunks, the last 256 bytes
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 7919 + 13);
    t_ = testing::MakeTensor<int32_t>("w", DType::kInt32, {2112}, std::move(values));
    testing::FixtureOptions options;
    options.chunk_bytes = 1024;
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 1, 1, {{{t_.desc}, {}}}, options).ok());
    auto io = CreateIoBackend({});
    ASSERT_TRUE(io.ok()) << io.status();
    io_ = std::move(io).value();
    auto reader = CheckpointFileReader::Open(RankFilePath(dir_.path(), 1, 0), io_.get());
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = std::move(reader).value();
    device_.assign(t_.desc.bytes(), '\0');
    copier_.device = device_.data();
  }

  Status Stream(uint64_t staging_bytes) {
    auto staging = DeviceStaging::Create(staging_bytes, 1024);
    if (!staging.ok()) return staging.status();
    return (*staging)->Stream(*reader_, *reader_->manifest().FindTensor("w"), true, &copier_,
                              device_.data());
  }

  const char* Saved() const { return reinterpret_cast<const char*>(t_.storage.data()); }

  TempDir dir_;
  testing::OwnedTensor<int32_t> t_;
  std::unique_ptr<IoBackend> io_;
  std::unique_ptr<CheckpointFileReader> reader_;
  std::vector<char> device_;
  FakeCopier copier_;
};

TEST_F(Staging, CopiesWholeChunksThroughBothHalves) {
  struct Case {
    uint64_t staging;
    std::vector<size_t> sizes;
    int max_pending;
  };
  const std::vector<Case> cases = {
      {64 << 20, {8448}, 1},                                             // one copy
      {4096, {2048, 2048, 2048, 2048, 256}, 2},                          // two chunks a half
      {3000, {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 256}, 2},  // one chunk a half
      {1500, {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 256}, 1},  // one chunk: in turn
      {100, {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 256}, 1}};  // grown to a chunk
  for (const Case& c : cases) {
    SCOPED_TRACE("staging " + std::to_string(c.staging));
    copier_.sizes.clear();
    copier_.pending = copier_.max_pending = copier_.clobbered = copier_.unwaited = 0;
    copier_.device = device_.data();
    std::fill(device_.begin(), device_.end(), '\0');
    Status s = Stream(c.staging);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(device_.data(), Saved(), device_.size()), 0);
    EXPECT_EQ(copier_.sizes, c.sizes);
    EXPECT_EQ(copier_.max_pending, c.max_pending);
    EXPECT_EQ(copier_.pending, 0);
    EXPECT_EQ(copier_.clobbered, 0);
    EXPECT_EQ(copier_.unwaited, 0);
  }
}

// Several tensors in one call go through one pipeline: the reader fills a half with the next
// tensor's first chunks while the last ones of the previous are checked and copied.
TEST_F(Staging, TensorsStreamThroughOnePipeline) {
  const TensorEntry* entry = reader_->manifest().FindTensor("w");
  std::vector<char> device(3 * device_.size(), '\0');
  copier_.device = device.data();
  std::vector<DeviceStaging::Item> items;
  for (int i = 0; i < 3; ++i)
    items.push_back({reader_.get(), entry, &copier_, device.data() + i * device_.size()});
  auto staging = DeviceStaging::Create(4096, 1024);
  ASSERT_TRUE(staging.ok()) << staging.status();
  Status s = (*staging)->Stream(items, true);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(device.data() + i * device_.size(), Saved(), device_.size()), 0) << i;
  std::vector<size_t> sizes;
  for (int i = 0; i < 3; ++i) sizes.insert(sizes.end(), {2048, 2048, 2048, 2048, 256});
  EXPECT_EQ(copier_.sizes, sizes);
  EXPECT_EQ(copier_.max_pending, 2);
  EXPECT_EQ(copier_.pending, 0);
  EXPECT_EQ(copier_.clobbered, 0);
  EXPECT_EQ(copier_.unwaited, 0);
}

TEST_F(Staging, DamagedChunkStopsTheStream) {
  const TensorEntry* entry = reader_->manifest().FindTensor("w");
  std::FILE* f = std::fopen(RankFilePath(dir_.path(), 1, 0).c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, static_cast<long>(entry->offset + 5 * 1024 + 7), SEEK_SET);
  std::fputc(Saved()[5 * 1024 + 7] ^ 0x40, f);
  std::fclose(f);
  Status s = Stream(4096);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("chunk 5 (bytes 5120..6144)"), std::string::npos) << s;
  // Chunks 0-3 went out in two copies, both waited for; chunk 4 never left host memory.
  EXPECT_EQ(copier_.sizes, (std::vector<size_t>{2048, 2048}));
  EXPECT_EQ(copier_.pending, 0);
  EXPECT_EQ(copier_.unwaited, 0);
  EXPECT_EQ(std::memcmp(device_.data(), Saved(), 4096), 0);
}

}  // namespace
}  // namespace rtft
