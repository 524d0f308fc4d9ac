#include <gtest/gtest.h>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

using namespace lt;

TEST(Core, Bf16AndHalfRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 3.1415926f, 65504.0f, 1e-6f, -1e-3f}) {
    EXPECT_NEAR(bf16_to_float(float_to_bf16(v)), v, std::abs(v) * 1e-2 + 1e-30);
    EXPECT_NEAR(half_to_float(float_to_half(v)), v, std::abs(v) * 1e-3 + 6e-8);
  }
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(1e6f))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Core, DeviceParse) {
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
  EXPECT_TRUE(Device::parse("meta").is_meta());
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

TEST(Core, ViewsShareStorage) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = transpose(x, 0, 1);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage(), x.storage());
  EXPECT_EQ(t.contiguous().to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor s = slice(x, 1, 1, 3);
  EXPECT_EQ(s.contiguous().to_float_vector(), (std::vector<float>{2, 3, 5, 6}));
}

TEST(Autograd, MatmulAddGradients) {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector(std::vector<float>{5, 6, 7, 8}, {2, 2});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = sum_all(add(matmul(a, b), a));
  y.backward();
  // d/da sum(a@b) = ones @ b^T; plus 1 from the add.
  EXPECT_EQ(a.grad().to_float_vector(), (std::vector<float>{12, 16, 12, 16}));
  EXPECT_EQ(b.grad().to_float_vector(), (std::vector<float>{4, 4, 6, 6}));
  EXPECT_EQ(a.grad().category(), Category::Gradient);
}
