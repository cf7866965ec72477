#include "checkpoint/layout/layout.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

#include "test_util.h"

namespace rtft {
namespace {

void PWrite(const std::string& path, uint64_t offset, const void* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, data, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ::close(fd);
}

TEST(Layout, SkeletonOffsetsAreAlignedAndInsideTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/f.h5";
  std::vector<DatasetSpec> specs = {
      {"model/w", DType::kFloat32, {256, 64}, {}},
      {"model/b", DType::kFloat32, {3}, {}},
      {"opt/m", DType::kBFloat16, {5000}, {{10000}, {5000}}},
      {"empty", DType::kInt64, {0}, {}},
      {"scalar", DType::kInt32, {}, {}},
  };
  auto offsets = CreateSkeleton(path, specs);
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  ASSERT_EQ(offsets->size(), specs.size());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ((*offsets)[0] % kDatasetAlignment, 0u);
  EXPECT_EQ((*offsets)[2] % kDatasetAlignment, 0u);
  EXPECT_EQ((*offsets)[3], 0u);
  EXPECT_GE(static_cast<uint64_t>(st.st_size), (*offsets)[0] + 256 * 64 * 4);
  EXPECT_GE(static_cast<uint64_t>(st.st_size), (*offsets)[2] + 10000);
  // Datasets do not overlap.
  EXPECT_TRUE((*offsets)[0] + 65536 <= (*offsets)[2] || (*offsets)[2] + 10000 <= (*offsets)[0]);
}

TEST(Layout, BytesWrittenAtOffsetsReadBackThroughH5dump) {
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed";
  TempDir dir;
  const std::string path = dir.path() + "/f.h5";
  std::vector<DatasetSpec> specs = {{"a/f32", DType::kFloat32, {2, 3}, {}},
                                    {"a/bf16", DType::kBFloat16, {4}, {}},
                                    {"a/f16", DType::kFloat16, {2}, {}},
                                    {"i64", DType::kInt64, {2}, {}}};
  auto offsets = CreateSkeleton(path, specs);
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  float f32[6] = {1.5f, -2, 3, 4, 5, 6.25f};
  uint16_t bf16[4] = {0x3f80, 0xc000, 0x4049, 0x0000};  // 1, -2, 3.140625, 0
  uint16_t f16[2] = {0x3c00, 0xc100};                   // 1, -2.5
  int64_t i64[2] = {-7, 1LL << 40};
  PWrite(path, (*offsets)[0], f32, sizeof(f32));
  PWrite(path, (*offsets)[1], bf16, sizeof(bf16));
  PWrite(path, (*offsets)[2], f16, sizeof(f16));
  PWrite(path, (*offsets)[3], i64, sizeof(i64));
  FileManifest m;
  m.version = 3;
  m.chunk_bytes = 1 << 20;
  ASSERT_TRUE(
      FinalizeFile(path, {{"step", "42"}, {"rng/state", std::string("\0\1\2", 3)}}, &m).ok());
  ASSERT_EQ(m.objects.size(), 2u);
  EXPECT_EQ(m.objects[0].bytes, 2u);

  std::string out = RunCommand(
      "h5dump -d /tensors/a/f32 -d /tensors/a/bf16 -d /tensors/a/f16 "
      "-d /tensors/i64 -d /objects/step " +
      path);
  EXPECT_NE(out.find("1.5, -2, 3,"), std::string::npos) << out;
  EXPECT_NE(out.find("6.25"), std::string::npos) << out;
  EXPECT_NE(out.find("1, -2, 3.14062, 0"), std::string::npos) << out;
  EXPECT_NE(out.find("1, -2.5"), std::string::npos) << out;
  EXPECT_NE(out.find("-7, 1099511627776"), std::string::npos) << out;
  EXPECT_NE(out.find("52, 50"), std::string::npos) << out;  // "42" as bytes

  auto back = ReadFileManifest(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 3u);
  ASSERT_NE(back->FindObject("rng/state"), nullptr);
  EXPECT_EQ(back->FindObject("rng/state")->bytes, 3u);
}

// The root attribute rtft_format_version, read as HDF5 stores it.
int RootFormatVersion(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t attr = H5Aopen(file, kFormatVersionAttribute, H5P_DEFAULT);
  int version = -1;
  if (attr >= 0) H5Aread(attr, H5T_NATIVE_INT, &version);
  H5Aclose(attr);
  H5Fclose(file);
  return version;
}

// Values whose bits a narrowing to float32, a text round trip with too few digits or a flush to
// zero would change: 0.1, pi, 1/3, the smallest subnormal, the largest double, and -0.0.
const double kHardDoubles[6] = {
    0.1, 3.141592653589793, 1.0 / 3.0, 4.9406564584124654e-324, 1.7976931348623157e308, -0.0};

TEST(Layout, Float64IsIeeeDoubleLittleEndianAndItsFilesAreFormatVersion2) {
  TempDir dir;
  const std::string path = dir.path() + "/f.h5";
  std::vector<DatasetSpec> specs = {{"field", DType::kFloat64, {2, 3}, {}},
                                    {"w", DType::kFloat32, {2}, {}}};
  auto offsets = CreateSkeleton(path, specs);
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  PWrite(path, (*offsets)[0], kHardDoubles, sizeof(kHardDoubles));
  const float w[2] = {1.5f, -2};
  PWrite(path, (*offsets)[1], w, sizeof(w));
  FileManifest m;
  m.chunk_bytes = 4096;
  m.tensors = {{"field", DType::kFloat64, {2, 3}, {}, (*offsets)[0], sizeof(kHardDoubles), {}},
               {"w", DType::kFloat32, {2}, {}, (*offsets)[1], sizeof(w), {}}};
  for (TensorEntry& t : m.tensors) t.xxh3 = {0};
  ASSERT_TRUE(FinalizeFile(path, {}, &m).ok());
  EXPECT_EQ(m.format_version, 2);
  EXPECT_EQ(RootFormatVersion(path), 2);
  auto back = ReadFileManifest(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->format_version, 2);
  EXPECT_EQ(back->tensors[0].dtype, DType::kFloat64);
  EXPECT_EQ(back->tensors[0].bytes, 48u);

  // The dataset's type is exactly H5T_IEEE_F64LE, and HDF5 converts it to native doubles with
  // every bit kept.
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t ds = H5Dopen2(file, "/tensors/field", H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  hid_t type = H5Dget_type(ds);
  EXPECT_GT(H5Tequal(type, H5T_IEEE_F64LE), 0);
  double read[6] = {};
  EXPECT_GE(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, read), 0);
  EXPECT_EQ(std::memcmp(read, kHardDoubles, sizeof(read)), 0);
  H5Tclose(type);
  H5Dclose(ds);
  H5Fclose(file);

  // A file without float64 stays at version 1, which every earlier rt-ft reads.
  const std::string old = dir.path() + "/old.h5";
  ASSERT_TRUE(CreateSkeleton(old, {specs[1]}).ok());
  FileManifest m1;
  m1.chunk_bytes = 4096;
  ASSERT_TRUE(FinalizeFile(old, {}, &m1).ok());
  EXPECT_EQ(m1.format_version, 1);
  EXPECT_EQ(RootFormatVersion(old), 1);
}

// h5dump prints every float64 value exactly (17 significant digits read back to the same bits).
TEST(Layout, Float64ValuesReadBackThroughH5dumpBitForBit) {
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed";
  TempDir dir;
  const std::string path = dir.path() + "/f.h5";
  auto offsets = CreateSkeleton(path, {{"field", DType::kFloat64, {6}, {}}});
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  PWrite(path, (*offsets)[0], kHardDoubles, sizeof(kHardDoubles));
  FileManifest m;
  m.chunk_bytes = 4096;
  m.tensors = {{"field", DType::kFloat64, {6}, {}, (*offsets)[0], sizeof(kHardDoubles), {0}}};
  ASSERT_TRUE(FinalizeFile(path, {}, &m).ok());

  int rc = -1;
  const std::string out = RunCommand("h5dump -m %.17g -d /tensors/field " + path, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("H5T_IEEE_F64LE"), std::string::npos) << out;
  // The values between "DATA {" and "}", without h5dump's "(i):" position markers.
  const size_t open = out.find("DATA {");
  ASSERT_NE(open, std::string::npos) << out;
  const std::string data = std::regex_replace(out.substr(open + 6, out.find('}', open) - open - 6),
                                              std::regex(R"(\(\d+\):)"), " ");
  const char* p = data.c_str();
  for (int i = 0; i < 6; ++i) {
    while (*p == ',' || std::isspace(static_cast<unsigned char>(*p))) ++p;
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    ASSERT_NE(end, p) << "value " << i << " in " << out;
    EXPECT_EQ(std::memcmp(&v, &kHardDoubles[i], sizeof(v)), 0)
        << "value " << i << ": h5dump printed " << std::string(p, static_cast<size_t>(end - p));
    p = end;
  }
}

TEST(Layout, RejectsFilesThatAreNotCheckpoints) {
  TempDir dir;
  const std::string text = dir.path() + "/notes.txt";
  std::ofstream(text) << "hello";
  auto s = ReadFileManifestJson(text);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not an HDF5 file"), std::string::npos);
  EXPECT_EQ(ReadFileManifestJson(dir.path() + "/missing.h5").status().code(),
            StatusCode::kNotFound);

  // A skeleton whose writer died before the manifest was written.
  const std::string unfinished = dir.path() + "/unfinished.h5";
  ASSERT_TRUE(CreateSkeleton(unfinished, {{"x", DType::kFloat32, {4}, {}}}).ok());
  auto u = ReadFileManifestJson(unfinished);
  EXPECT_EQ(u.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(u.status().message().find("no manifest"), std::string::npos);

  // Truncated in the middle of its metadata.
  FileManifest m;
  m.chunk_bytes = 4096;
  ASSERT_TRUE(FinalizeFile(unfinished, {}, &m).ok());
  ASSERT_TRUE(ReadFileManifestJson(unfinished).ok());
  struct stat st;
  ASSERT_EQ(::stat(unfinished.c_str(), &st), 0);
  ASSERT_EQ(::truncate(unfinished.c_str(), st.st_size / 2), 0);
  EXPECT_EQ(ReadFileManifestJson(unfinished).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace rtft
