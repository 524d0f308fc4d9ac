// weight_bias_grad (src/ops/matmul.cpp): a linear's dW and db in one gemm_bgrad call. On the CPU
// it must give the bits of the two ops it replaces (matmul, then sum_to) for both weight layouts
// and dtypes, and either gradient alone; the backend op refuses a summed operand stored the wrong
// way round on CUDA (OpsBackends' *_bgrad_* and *_dgelu* cases compare the CUDA epilogues with the
// CPU in every dtype).
#include <gtest/gtest.h>

#include "leantrain/ops.h"
#include "ops/linear_args.h"

using namespace lt;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt) {
  Generator g(seed);
  return randn(s, g, 1.0f, dt);
}

std::vector<float> bits(const Tensor& t) { return t.defined() ? t.to_float_vector() : std::vector<float>{}; }

}  // namespace

TEST(WeightBiasGrad, EqualsMatmulThenSumToBitwise) {
  for (DType dt : {DType::F32, DType::BF16})
    for (bool in_out : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (in_out ? " [in, out]" : " [out, in]"));
      Tensor g2 = rnd({48, 24}, 1, dt), x2 = rnd({48, 40}, 2, dt);
      detail::WeightBiasGrad r = detail::weight_bias_grad(g2, x2, in_out, true, true);
      Tensor w = in_out ? matmul(x2, g2, true, false) : matmul(g2, x2, true, false);
      Tensor b = sum_to(g2, {24});
      EXPECT_EQ(r.w.shape(), w.shape());
      EXPECT_EQ(r.b.shape(), Shape({24}));
      EXPECT_EQ(bits(r.w), bits(w));
      EXPECT_EQ(bits(r.b), bits(b));
    }
}

TEST(WeightBiasGrad, EitherGradientAlone) {
  Tensor g2 = rnd({16, 8}, 3, DType::F32), x2 = rnd({16, 12}, 4, DType::F32);
  detail::WeightBiasGrad only_w = detail::weight_bias_grad(g2, x2, false, true, false);
  EXPECT_FALSE(only_w.b.defined());
  EXPECT_EQ(bits(only_w.w), bits(matmul(g2, x2, true, false)));
  detail::WeightBiasGrad only_b = detail::weight_bias_grad(g2, Tensor(), false, false, true);
  EXPECT_FALSE(only_b.w.defined());
  EXPECT_EQ(bits(only_b.b), bits(sum_to(g2, {8})));
}

TEST(WeightBiasGrad, StridedOperandsTakeTheTwoOps) {
  // A transposed view is not contiguous: the helper falls back to matmul and sum_to.
  Tensor g2 = rnd({8, 16}, 5, DType::F32), x2 = transpose(rnd({12, 16}, 6, DType::F32), 0, 1);
  Tensor g = transpose(g2, 0, 1);  // [16, 8], strided
  detail::WeightBiasGrad r = detail::weight_bias_grad(g, x2, false, true, true);
  EXPECT_EQ(bits(r.w), bits(matmul(g, x2, true, false)));
  EXPECT_EQ(bits(r.b), bits(sum_to(g, {8})));
}
