// Float64 gradchecks of the elementwise ops, broadcasting included.
#include "unit/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

using V = std::vector<Tensor>;

TEST(Gradcheck, AddBroadcast) {
  EXPECT_TRUE(gradcheck([](const V& x) { return add(x[0], x[1]); }, {rand64({2, 3, 4}, 1), rand64({3, 1}, 2)}));
}

TEST(Gradcheck, SubBroadcast) {
  EXPECT_TRUE(gradcheck([](const V& x) { return sub(x[0], x[1]); }, {rand64({4}, 3), rand64({2, 3, 4}, 4)}));
}

TEST(Gradcheck, MulBroadcast) {
  EXPECT_TRUE(gradcheck([](const V& x) { return mul(x[0], x[1]); }, {rand64({2, 1, 4}, 5), rand64({3, 1}, 6)}));
}

TEST(Gradcheck, DivBroadcast) {
  EXPECT_TRUE(gradcheck([](const V& x) { return div(x[0], x[1]); }, {rand64({3, 4}, 7), rand64({4}, 8, 0.5, 2.0)}));
}

TEST(Gradcheck, OnlyOneSideRequiresGrad) {
  Tensor b = rand64({3}, 10);
  b.set_requires_grad(false);
  EXPECT_TRUE(gradcheck([&](const V& x) { return mul(x[0], b); }, {rand64({2, 3}, 9)}));
  EXPECT_TRUE(gradcheck([&](const V& x) { return div(b, x[0]); }, {rand64({2, 3}, 11, 0.5, 2.0)}));
}

TEST(Gradcheck, SameTensorTwice) {
  EXPECT_TRUE(gradcheck([](const V& x) { return mul(x[0], x[0]); }, {rand64({5}, 12)}));
}

TEST(Gradcheck, ScaleAddScalarNeg) {
  EXPECT_TRUE(gradcheck([](const V& x) { return scale(x[0], -1.7); }, {rand64({6}, 13)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return add_scalar(x[0], 0.3); }, {rand64({6}, 14)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return neg(x[0]); }, {rand64({6}, 15)}));
}

TEST(Gradcheck, Transcendental) {
  EXPECT_TRUE(gradcheck([](const V& x) { return exp(x[0]); }, {rand64({7}, 16)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return log(x[0]); }, {rand64({7}, 17, 0.5, 2.0)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sqrt(x[0]); }, {rand64({7}, 18, 0.5, 2.0)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return tanh(x[0]); }, {rand64({7}, 19)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sigmoid(x[0]); }, {rand64({7}, 20)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return log_sigmoid(x[0]); }, {rand64({7}, 24, -6.0, 6.0)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return pow_scalar(x[0], 1.7); }, {rand64({7}, 21, 0.5, 2.0)}));
}

TEST(Gradcheck, Activations) {
  EXPECT_TRUE(gradcheck([](const V& x) { return relu(x[0]); }, {rand64({9}, 22)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return gelu(x[0], GeluApprox::Tanh); }, {rand64({9}, 23)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return gelu(x[0], GeluApprox::Erf); }, {rand64({9}, 24)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return silu(x[0]); }, {rand64({9}, 25)}));
}

TEST(Gradcheck, UnaryOfStridedView) {
  EXPECT_TRUE(gradcheck([](const V& x) { return exp(transpose(x[0], 0, 1)); }, {rand64({3, 4}, 26)}));
}

// The check itself must be able to fail: a wrong backward is caught.
TEST(Gradcheck, DetectsAWrongBackward) {
  auto wrong = [](const V& x) {
    Tensor y = x[0].detach().clone();
    record(y, "wrong", {x[0]}, [](const Tensor& g) { return std::vector<Tensor>{scale(g, 2.0)}; });
    return y;
  };
  EXPECT_FALSE(gradcheck(wrong, {rand64({3}, 27)}));
}

}  // namespace
