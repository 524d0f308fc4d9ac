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

// The CUDA norm (vectorised for aligned f32, element by element otherwise) against the CPU's:
// f32 tensors of sizes that are not multiples of 4 or of a chunk, one starting one element into
// its storage (not 16-byte aligned), and a bf16 one.
TEST(OptimClip, CudaNormMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  Generator gen(17);
  std::vector<Tensor> cpu, gpu;
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(16384 * 3 + 5), int64_t(100003)}) {
    Tensor g = randn({n}, gen);
    cpu.push_back(param_with_grad(std::vector<double>(size_t(n), 0.0), g.to_double_vector(), DType::F32));
    gpu.push_back(to_device(cpu.back().detach(), Device::cuda()).set_requires_grad(true));
    gpu.back().set_grad(to_device(cpu.back().grad(), Device::cuda()));
  }
  Tensor base = randn({4097}, gen);
  Tensor off = slice(to_device(base, Device::cuda()), 0, 1, 4097);  // one element in: misaligned
  Tensor p = zeros({4096}, DType::F32, Device::cuda()).set_requires_grad(true);
  p.set_grad(off);
  gpu.push_back(p);
  cpu.push_back(param_with_grad(std::vector<double>(4096, 0.0), slice(base, 0, 1, 4097).to_double_vector(), DType::F32));
  Tensor h = randn({999}, gen, 1.0f, DType::BF16);
  gpu.push_back(zeros({999}, DType::BF16, Device::cuda()).set_requires_grad(true));
  gpu.back().set_grad(to_device(h, Device::cuda()));
  cpu.push_back(param_with_grad(std::vector<double>(999, 0.0), h.to_double_vector(), DType::BF16));
  const double want = clip_grad_norm(cpu, 0).norm, got = clip_grad_norm(gpu, 0).norm;
  EXPECT_NEAR(got, want, 1e-5 * want);
}
