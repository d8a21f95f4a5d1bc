// Tensor descriptors: element counts, torch's contiguity rule, dtype names as torch spells them.
#include <gtest/gtest.h>

#include "runtime/common/tensor_ref.h"

namespace anyep::runtime {
namespace {

TEST(TensorRef, ContiguousRefIsRowMajorAndOwnsItsBytes) {
  const TensorRef t = contiguous_ref(nullptr, DType::kFloat32, {2, 3, 4}, 0);
  EXPECT_TRUE(t.present());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.storage_bytes, 96);
  EXPECT_TRUE(t.contiguous());
  EXPECT_EQ(shape_str(t), "[2, 3, 4]");
  EXPECT_FALSE(TensorRef{}.present());
}

TEST(TensorRef, ContiguityFollowsTorch) {
  TensorRef t = contiguous_ref(nullptr, DType::kInt32, {4, 1, 8}, 0);
  t.strides[1] = 12345;  // size-1 dimensions may have any stride
  EXPECT_TRUE(t.contiguous());
  t.strides[2] = 2;  // every other element
  EXPECT_FALSE(t.contiguous());
  TensorRef transposed = contiguous_ref(nullptr, DType::kInt32, {3, 5}, 0);
  transposed.strides[0] = 1;
  transposed.strides[1] = 3;
  EXPECT_FALSE(transposed.contiguous());
  TensorRef empty = contiguous_ref(nullptr, DType::kInt32, {0, 5}, 0);
  empty.strides[1] = 7;  // no elements: contiguous whatever the strides
  EXPECT_TRUE(empty.contiguous());
}

TEST(TensorRef, DTypeNamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "BFloat16");
  EXPECT_STREQ(dtype_name(DType::kInt64), "Long");
  EXPECT_STREQ(dtype_name(DType::kFloat32), "Float");
  EXPECT_STREQ(dtype_name(DType::kInt32), "Int");
  EXPECT_STREQ(dtype_name(DType::kFloat8_e4m3fn), "Float8_e4m3fn");
  EXPECT_EQ(dtype_bytes(DType::kBFloat16), 2);
  EXPECT_EQ(dtype_bytes(DType::kFloat8_e4m3fn), 1);
  EXPECT_EQ(dtype_bytes(DType::kInt64), 8);
  EXPECT_EQ(dtype_bytes(DType::kOther), 0);
}

TEST(TensorRef, SpecKeepsTheLargerStorage) {
  const OutputSpec s = contiguous_spec(DType::kInt32, {2, 8}, 40);
  EXPECT_EQ(s.numel(), 16);
  EXPECT_EQ(s.storage_elems, 40);
  EXPECT_EQ(contiguous_spec(DType::kInt32, {2, 8}).storage_elems, 16);
}

}  // namespace
}  // namespace anyep::runtime
