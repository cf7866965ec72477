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
                  DType::kInt64, DType::kUInt8}) {
    DType back;
    ASSERT_TRUE(ParseDType(DTypeName(d), &back));
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  DType d;
  EXPECT_FALSE(ParseDType("float128", &d));
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
