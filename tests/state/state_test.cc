#include <gtest/gtest.h>

#include <vector>

#include "rtft/state.h"

namespace rtft {
namespace {

TensorDesc Tensor(const std::string& name, int64_t n, void* data) {
  TensorDesc t;
  t.name = name;
  t.dtype = DType::kFloat32;
  t.shape = {n};
  t.data = data;
  return t;
}

TEST(DType, NamesAndSizes) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kInt32,
                  DType::kInt64, DType::kUInt8, DType::kFloat64}) {
    DType back;
    ASSERT_TRUE(ParseDType(DTypeName(d), &back));
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  DType d;
  EXPECT_FALSE(ParseDType("float128", &d));
  EXPECT_FALSE(ParseDType("double", &d));  // one spelling only: the manifest's
}

// float64 came last, so the numbers that travel in frames and hashes kept their values.
TEST(DType, Float64IsAppendedWithoutRenumbering) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 0);
  EXPECT_EQ(static_cast<int>(DType::kUInt8), 6);
  EXPECT_EQ(static_cast<int>(DType::kFloat64), 7);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_STREQ(DTypeName(DType::kFloat64), "float64");
  DType d = DType::kFloat32;
  ASSERT_TRUE(ParseDType("float64", &d));
  EXPECT_EQ(d, DType::kFloat64);
  EXPECT_EQ(DTypeSize(static_cast<DType>(8)), 0u);  // past the end: no size
  EXPECT_STREQ(DTypeName(static_cast<DType>(8)), "unknown");
}

TEST(ValidateDescription, AFloat64TensorsBytesAreEightPerElement) {
  std::vector<double> buf(6);
  TensorDesc t;
  t.name = "field";
  t.dtype = DType::kFloat64;
  t.shape = {2, 3};
  t.data = buf.data();
  EXPECT_EQ(t.bytes(), 48u);
  StateDescription s;
  s.tensors.push_back(t);
  EXPECT_TRUE(ValidateDescription(s).ok());
  // 2^61 elements of 8 bytes overflow 64 bits: refused, not wrapped.
  s.tensors[0].shape = {int64_t{1} << 61};
  EXPECT_EQ(ValidateDescription(s).code(), StatusCode::kInvalidArgument);
}

TEST(CompositeProvider, CoalescesSmallTensorsPerGroupLimit) {
  std::vector<float> buf(1 << 16);
  CompositeProvider c(/*small_tensor_bytes=*/1024, /*group_bytes=*/4096);
  for (int i = 0; i < 10; ++i) c.AddTensor(Tensor("small" + std::to_string(i), 128, buf.data()));
  c.AddTensor(Tensor("big", 4096, buf.data()));
  c.AddObject({"step", [] { return StatusOr<std::string>(std::string("7")); }, nullptr});
  StateDescription s;
  ASSERT_TRUE(c.Describe(&s).ok());
  ASSERT_EQ(s.tensors.size(), 11u);
  ASSERT_EQ(s.objects.size(), 1u);
  // 512-byte tensors, 4096-byte groups: 8 per group.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.tensors[i].coalesce_group, 0);
  EXPECT_EQ(s.tensors[8].coalesce_group, 1);
  EXPECT_EQ(s.tensors[9].coalesce_group, 1);
  EXPECT_EQ(s.tensors[10].coalesce_group, -1);
  EXPECT_TRUE(ValidateDescription(s).ok());
}

TEST(Validate, RejectsBadDescriptions) {
  float x[4];
  StateDescription dup;
  dup.tensors = {Tensor("a", 4, x), Tensor("a", 4, x)};
  EXPECT_EQ(ValidateDescription(dup).code(), StatusCode::kInvalidArgument);
  StateDescription bad_name;
  bad_name.tensors = {Tensor("/a", 4, x)};
  EXPECT_FALSE(ValidateDescription(bad_name).ok());
  StateDescription null_data;
  null_data.tensors = {Tensor("a", 4, nullptr)};
  EXPECT_FALSE(ValidateDescription(null_data).ok());
  StateDescription shard;
  shard.tensors = {Tensor("w", 4, x)};
  shard.tensors[0].shard.global_shape = {6};
  shard.tensors[0].shard.offset = {4};
  Status s = ValidateDescription(shard);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside"), std::string::npos);
  shard.tensors[0].shard.offset = {2};
  EXPECT_TRUE(ValidateDescription(shard).ok());
}

}  // namespace
}  // namespace rtft
