// Float64 gradchecks of matrix products, reductions and shape/layout ops.
#include "unit/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

using V = std::vector<Tensor>;

TEST(Gradcheck, MatmulPlainAndBatched) {
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({3, 4}, 1), rand64({4, 2}, 2)}));
  EXPECT_TRUE(
      gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({2, 2, 3, 4}, 3), rand64({2, 2, 4, 5}, 4)}));
}

TEST(Gradcheck, MatmulTransposed) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Shape as = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      Shape bs = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
      EXPECT_TRUE(gradcheck([=](const V& x) { return matmul(x[0], x[1], ta, tb); }, {rand64(as, 5), rand64(bs, 6)}))
          << "trans_a " << ta << " trans_b " << tb;
    }
}

TEST(Gradcheck, MatmulBroadcastBatch) {
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({3, 4}, 7), rand64({2, 4, 5}, 8)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1], false, true); },
                        {rand64({2, 3, 3, 4}, 9), rand64({1, 5, 4}, 10)}));
}

TEST(Gradcheck, Linear) {
  EXPECT_TRUE(gradcheck([](const V& x) { return linear(x[0], x[1], x[2]); },
                        {rand64({2, 3, 4}, 11), rand64({5, 4}, 12), rand64({5}, 13)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return linear(x[0], x[1], Tensor()); }, {rand64({3, 4}, 14), rand64({2, 4}, 15)}));
}

TEST(Gradcheck, Reductions) {
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(x[0], {0, 2}, true); }, {rand64({2, 3, 4}, 16)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(x[0], {-1}, false); }, {rand64({2, 3, 4}, 17)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mean(x[0], {1}, false); }, {rand64({2, 3, 4}, 18)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sum_all(x[0]); }, {rand64({3, 4}, 19)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mean_all(x[0]); }, {rand64({3, 4}, 20)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sum_to(x[0], {3, 1}); }, {rand64({2, 3, 4}, 21)}));
}

TEST(Gradcheck, ReshapePermuteTranspose) {
  EXPECT_TRUE(gradcheck([](const V& x) { return reshape(x[0], {4, -1}); }, {rand64({2, 3, 4}, 22)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return permute(x[0], {2, 0, 1}); }, {rand64({2, 3, 4}, 23)}));
  // A reshape of a non-contiguous view copies; its gradient must reach the right elements.
  EXPECT_TRUE(gradcheck([](const V& x) { return reshape(transpose(x[0], 0, 2), {-1}); }, {rand64({2, 3, 4}, 24)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return contiguous(transpose(x[0], 0, 1)); }, {rand64({3, 5}, 25)}));
}

TEST(Gradcheck, SliceSelectConcat) {
  EXPECT_TRUE(gradcheck([](const V& x) { return slice(x[0], 1, 1, -1); }, {rand64({2, 5, 3}, 26)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return select(x[0], 2, -1); }, {rand64({2, 3, 4}, 27)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return concat({x[0], x[1], x[2]}, 1); },
                        {rand64({2, 1, 3}, 28), rand64({2, 4, 3}, 29), rand64({2, 2, 3}, 30)}));
  // The same tensor twice, and a slice of a concat: gradients add up.
  EXPECT_TRUE(gradcheck([](const V& x) { return slice(concat({x[0], x[0]}, 0), 0, 1, 3); }, {rand64({2, 3}, 31)}));
}

TEST(Gradcheck, ExpandCastPatchify) {
  EXPECT_TRUE(gradcheck([](const V& x) { return expand(x[0], {2, 3, 4}); }, {rand64({3, 1}, 32)}));
  // Through f32 and back: the step must exceed f32 rounding.
  GradcheckOptions loose{1e-3, 1e-4, 1e-3};
  EXPECT_TRUE(gradcheck([](const V& x) { return cast(scale(cast(x[0], DType::F32), 3.0), DType::F64); },
                        {rand64({5}, 33)}, loose));
  EXPECT_TRUE(gradcheck([](const V& x) { return patchify(x[0], 2); }, {rand64({2, 3, 4, 6}, 34)}));
}

}  // namespace

namespace {

// expand to the same shape is the identity and must leave a leaf a leaf.
TEST(ShapeOps, ExpandToSameShapeKeepsLeaf) {
  Tensor x = rand64({2, 3}, 35);
  Tensor y = expand(x, {2, 3});
  EXPECT_TRUE(x.is_leaf());
  sum_all(y).backward();
  EXPECT_EQ(x.grad().to_double_vector(), std::vector<double>(6, 1.0));
}

}  // namespace
