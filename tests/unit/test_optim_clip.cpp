// Global-norm clipping: the norm's value, and its effect through the optimizer's grad_scale.
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

using namespace lt;

namespace {
Tensor param_with_grad(std::vector<double> p, std::vector<double> g, DType t = DType::F64) {
  Shape s{int64_t(p.size())};
  Tensor x = from_vector(p, s, t).set_requires_grad(true);
  x.set_grad(from_vector(g, s, t));
  return x;
}
}  // namespace

TEST(OptimClip, NormAndCoefficient) {
  Tensor a = param_with_grad({0, 0}, {3, 0});
  Tensor b = param_with_grad({0, 0, 0}, {0, 4, 12});
  Tensor c = from_vector(std::vector<double>{1}, {1}, DType::F64).set_requires_grad(true);  // no grad: skipped
  GradNorm r = clip_grad_norm({a, b, c}, 6.5);
  EXPECT_DOUBLE_EQ(r.norm, 13.0);
  EXPECT_TRUE(r.finite());
  EXPECT_NEAR(r.clip_coef, 6.5 / (13.0 + 1e-6), 1e-7);
  EXPECT_FLOAT_EQ(r.grad_scale, r.clip_coef);
  // Gradients are untouched: the scale is applied inside the step.
  EXPECT_EQ(b.grad().to_double_vector(), (std::vector<double>{0, 4, 12}));
  // Under the limit: no clipping. max_norm <= 0: measure only.
  EXPECT_FLOAT_EQ(clip_grad_norm({a, b}, 100).clip_coef, 1.0f);
  EXPECT_FLOAT_EQ(clip_grad_norm({a, b}, 0).grad_scale, 1.0f);
}

TEST(OptimClip, PreScaleUnscalesTheNorm) {
  Tensor a = param_with_grad({0, 0}, {300, 400}, DType::F32);  // grads still carry a loss scale of 100
  GradNorm r = clip_grad_norm({a}, 1.0, 0.01f);
  EXPECT_NEAR(r.norm, 5.0, 1e-5);
  EXPECT_NEAR(r.grad_scale, 0.01 * 1.0 / 5.0, 1e-8);
}

TEST(OptimClip, NonFiniteNormIsReported) {
  Tensor a = param_with_grad({0, 0}, {1, std::nan("")});
  GradNorm r = clip_grad_norm({a}, 1.0);
  EXPECT_FALSE(r.finite());
  EXPECT_TRUE(std::isnan(r.grad_scale));
  Tensor b = param_with_grad({0}, {INFINITY}, DType::F32);
  EXPECT_FALSE(clip_grad_norm({b}, 1.0).finite());
}

// The clipped SGD step equals a step on gradients scaled to norm max_norm.
TEST(OptimClip, ClippedStepEqualsStepOnClippedGrads) {
  Tensor a = param_with_grad({1, 2}, {3, 4});
  SgdOptions o;
  o.lr = 0.5;
  SGD opt(std::vector<NamedTensor>{{"a", a}}, o);
  GradNorm r = clip_grad_norm({a}, 1.0);
  opt.step(r.grad_scale);
  auto p = a.to_double_vector();
  double coef = double(float(1.0 / (5.0 + 1e-6)));
  EXPECT_NEAR(p[0], 1 - double(float(0.5)) * 3 * coef, 1e-12);
  EXPECT_NEAR(p[1], 2 - double(float(0.5)) * 4 * coef, 1e-12);
}
