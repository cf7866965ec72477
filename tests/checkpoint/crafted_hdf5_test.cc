// Rank files whose HDF5 metadata was crafted: the format-version attribute and the manifest
// dataset with another class, size, dataspace, storage or link kind than rt-ft writes. Before the
// reader checked them, several of these overwrote the stack or the heap (a read of N elements
// into room for one). Each must now be refused with DataLoss, in every reader, without a crash.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <functional>
#include <string>

#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint_fixture.h"
#include "child_process.h"
#include "rtft/checkpoint.h"
#include "test_util.h"

namespace rtft {
namespace {

using testing::MakeTensor;
using testing::RunInChild;

// Opens a rank file with HDF5's own driver and lets `craft` change it.
void Craft(const std::string& path, const std::function<void(hid_t file)>& craft) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  craft(file);
  ASSERT_GE(H5Fclose(file), 0);
}

void ReplaceVersionAttribute(hid_t file, hid_t type, hid_t space, const void* data) {
  ASSERT_GE(H5Adelete(file, kFormatVersionAttribute), 0);
  hid_t attr = H5Acreate2(file, kFormatVersionAttribute, type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0);
  if (data) ASSERT_GE(H5Awrite(attr, type, data), 0);
  H5Aclose(attr);
}

// Replaces /rtft_manifest with a dataset of `type` and `space`, optionally written.
void ReplaceManifest(hid_t file, hid_t type, hid_t space, const void* data,
                     hid_t dcpl = H5P_DEFAULT) {
  ASSERT_GE(H5Ldelete(file, kManifestDataset, H5P_DEFAULT), 0);
  hid_t ds = H5Dcreate2(file, kManifestDataset, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  if (data) ASSERT_GE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
  H5Dclose(ds);
}

class CraftedHdf5 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteVersion(dir_.path(), 1, 1, {{{w_.desc}, {}}}).ok());
    path_ = RankFilePath(dir_.path(), 1, 0);
    // The global manifest holds the file's size and manifest checksum; every reader below must
    // refuse the file on its own, before those comparisons, so they are made to match nothing.
  }

  // Every reader refuses the file with DataLoss (or InvalidArgument) mentioning `words`.
  void ExpectRefused(const std::string& words) {
    const std::string dir = dir_.path(), path = path_;
    auto manifest = RunInChild([&] { return ReadFileManifestJson(path).status(); });
    ASSERT_TRUE(manifest.returned) << manifest.Describe();
    EXPECT_EQ(manifest.code, StatusCode::kDataLoss) << manifest.Describe();
    EXPECT_NE(manifest.message.find(words), std::string::npos) << manifest.Describe();
    auto verify = RunInChild([&] { return VerifyVersion(dir, 1); });
    ASSERT_TRUE(verify.returned) << verify.Describe();
    EXPECT_EQ(verify.code, StatusCode::kDataLoss) << verify.Describe();
    auto restore = RunInChild([&] {
      auto out = MakeTensor<float>("model/w", DType::kFloat32, {64}, std::vector<float>(64));
      return Restore(dir, {}, TensorProvider(out.desc));
    });
    ASSERT_TRUE(restore.returned) << restore.Describe();
    EXPECT_EQ(restore.code, StatusCode::kDataLoss) << restore.Describe();
  }

  TempDir dir_;
  testing::OwnedTensor<float> w_ =
      MakeTensor<float>("model/w", DType::kFloat32, {64}, std::vector<float>(64, 1.5f));
  std::string path_;
};

TEST_F(CraftedHdf5, FormatVersionOfManyElements) {
  Craft(path_, [](hid_t file) {
    hsize_t n = 10000;  // 40 KB, where the reader had room for 4 bytes
    hid_t space = H5Screate_simple(1, &n, nullptr);
    std::vector<int32_t> values(n, 1);
    ReplaceVersionAttribute(file, H5T_STD_I32LE, space, values.data());
    H5Sclose(space);
  });
  ExpectRefused("format version is not one integer");
}

TEST_F(CraftedHdf5, FormatVersionOfAnotherClass) {
  Craft(path_, [](hid_t file) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 5000);
    hid_t space = H5Screate(H5S_SCALAR);
    std::string text(5000, 'x');
    ReplaceVersionAttribute(file, type, space, text.data());
    H5Sclose(space);
    H5Tclose(type);
  });
  ExpectRefused("format version is not one integer");
  Craft(path_, [](hid_t file) {
    hid_t space = H5Screate(H5S_SCALAR);
    double one = 1;
    ReplaceVersionAttribute(file, H5T_IEEE_F64LE, space, &one);
    H5Sclose(space);
  });
  ExpectRefused("format version is not one integer");
}

TEST_F(CraftedHdf5, ManifestOfManyStrings) {
  Craft(path_, [](hid_t file) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 64);
    hsize_t n = 20000;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    std::string data(64 * n, 'A');
    ReplaceManifest(file, type, space, data.data());
    H5Sclose(space);
    H5Tclose(type);
  });
  ExpectRefused("is not a single string");
}

TEST_F(CraftedHdf5, ManifestOfAnotherType) {
  Craft(path_, [](hid_t file) {
    hsize_t n = 20000;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    std::vector<int64_t> data(n, 7);
    ReplaceManifest(file, H5T_STD_I64LE, space, data.data());
    H5Sclose(space);
  });
  ExpectRefused("is not a fixed-length string");
  Craft(path_, [](hid_t file) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    const char* text = "{}";
    ReplaceManifest(file, type, space, &text);
    H5Sclose(space);
    H5Tclose(type);
  });
  ExpectRefused("is not a fixed-length string");
}

// A few hundred bytes of metadata that declare a gigabyte string: refused before any allocation.
TEST_F(CraftedHdf5, ManifestDeclaringMoreThanTheFileHolds) {
  Craft(path_, [](hid_t file) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 1ull << 30);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
    ReplaceManifest(file, type, space, nullptr, dcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
  });
  ExpectRefused("declares 1073741824 bytes");
}

// Links and external storage would make HDF5 open another file by name: a FIFO there would hang
// the reader, a private file would be read as the manifest.
TEST_F(CraftedHdf5, ManifestThatLeadsToAnotherFile) {
  const std::string fifo = dir_.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Craft(path_, [&](hid_t file) {
    ASSERT_GE(H5Ldelete(file, kManifestDataset, H5P_DEFAULT), 0);
    ASSERT_GE(
        H5Lcreate_external(fifo.c_str(), "/x", file, kManifestDataset, H5P_DEFAULT, H5P_DEFAULT),
        0);
  });
  ExpectRefused("a link to somewhere else");
  Craft(path_, [](hid_t file) {
    ASSERT_GE(H5Ldelete(file, kManifestDataset, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/tensors/model/w", file, kManifestDataset, H5P_DEFAULT, H5P_DEFAULT),
              0);
  });
  ExpectRefused("a link to somewhere else");
  Craft(path_, [&](hid_t file) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 100);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_external(dcpl, fifo.c_str(), 0, 100), 0);
    ReplaceManifest(file, type, space, nullptr, dcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
  });
  ExpectRefused("not stored as rt-ft stores it");
}

}  // namespace
}  // namespace rtft
