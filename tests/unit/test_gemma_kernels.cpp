// The kernel variants Gemma 3 needs, against references written with plain ops in f64: the
// unit-offset RMSNorm (x * rstd * (1 + w), Gemma3RMSNorm) and the gated GELU (GeGLU:
// gelu_tanh(gate) * up), forward and every gradient; and in bf16 against the f64 result rounded
// the way transformers rounds it (once at the end for the norm; after the activation for GeGLU).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "leantrain/autograd.h"
#include "leantrain/ops.h"
#include "unit/gradcheck.h"

using namespace lt;
using test::rand64;

namespace {

// Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), as separate ops.
Tensor naive_unit_rms(const Tensor& x, const Tensor& w, double eps) {
  // sum / C, not mean(): mean scales by an f32 1/C, an error of 3e-8 where this wants f64.
  Tensor ms = div(sum(mul(x, x), {-1}, true), full({1}, double(x.size(-1)), DType::F64));
  return mul(div(x, sqrt(add_scalar(ms, eps))), add_scalar(w, 1.0));
}

// Values and gradients of sum(f(inputs) * r) for the op and the reference.
void expect_same(const std::function<Tensor(const std::vector<Tensor>&)>& op,
                 const std::function<Tensor(const std::vector<Tensor>&)>& ref, std::vector<Tensor> in, double tol) {
  auto run = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f) {
    zero_grad(in);
    Tensor y = f(in);
    Generator gen(7);
    sum_all(mul(y, randn(y.shape(), gen, 1.0f, DType::F64))).backward();
    std::vector<std::vector<double>> out{y.to_double_vector()};
    for (Tensor& t : in) out.push_back(t.grad().to_double_vector());
    return out;
  };
  auto got = run(op), want = run(ref);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size());
    for (size_t i = 0; i < got[k].size(); ++i) ASSERT_NEAR(got[k][i], want[k][i], tol) << "output/grad " << k << " [" << i << "]";
  }
}

TEST(GemmaKernels, UnitOffsetRmsNormMatchesTheNaiveF64Norm) {
  using V = std::vector<Tensor>;
  expect_same([](const V& v) { return rms_norm(v[0], v[1], 1e-6, true); },
              [](const V& v) { return naive_unit_rms(v[0], v[1], 1e-6); }, {rand64({3, 5, 12}, 1), rand64({12}, 2)},
              1e-12);
  // The fused residual add: y and the sum both carry gradient.
  expect_same(
      [](const V& v) {
        AddNormResult r = add_rms_norm(v[0], v[1], v[2], 1e-5, true);
        return concat({r.sum, r.y}, 0);
      },
      [](const V& v) {
        Tensor s = add(v[0], v[1]);
        return concat({s, naive_unit_rms(s, v[2], 1e-5)}, 0);
      },
      {rand64({4, 9}, 3), rand64({4, 9}, 4), rand64({9}, 5)}, 1e-12);
  // Not the same as without the offset (the test can tell them apart).
  Tensor x = rand64({2, 8}, 6), w = rand64({8}, 7);
  EXPECT_GT(std::abs(rms_norm(x, w, 1e-6, true).to_double_vector()[0] - rms_norm(x, w).to_double_vector()[0]), 1e-3);
}

TEST(GemmaKernels, UnitOffsetRmsNormRoundsOnceInBf16) {
  Tensor x = rand64({6, 40}, 8), w = rand64({40}, 9);
  NoGradGuard ng;
  const Tensor xb = cast(x, DType::BF16), wb = cast(w, DType::BF16);
  // transformers: (x.float() normalised * (1 + w.float())).type_as(x): the f64 value of the
  // bf16 inputs, rounded once to bf16 (f32 arithmetic may land one bf16 step away at a tie).
  const std::vector<double> want = cast(cast(naive_unit_rms(cast(xb, DType::F64), cast(wb, DType::F64), 1e-6),
                                             DType::BF16), DType::F64).to_double_vector();
  const std::vector<double> got = rms_norm(xb, wb, 1e-6, true).to_double_vector();
  int off = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * 0.0079 + 1e-30) << i;  // at most one bf16 step
    off += got[i] != want[i];
  }
  EXPECT_LE(off, int(want.size()) / 20);
}

TEST(GemmaKernels, GegluMatchesGeluTanhTimesUp) {
  using V = std::vector<Tensor>;
  const GateAct g = GateAct::GeluTanh;
  expect_same([g](const V& v) { return swiglu(v[0], v[1], g); },
              [](const V& v) { return mul(gelu(v[0], GeluApprox::Tanh), v[1]); }, {rand64({3, 7}, 10), rand64({3, 7}, 11)},
              1e-12);
  expect_same([g](const V& v) { return swiglu_packed(v[0], g); },
              [](const V& v) { return mul(gelu(slice(v[0], -1, 0, 6), GeluApprox::Tanh), slice(v[0], -1, 6, 12)); },
              {rand64({2, 3, 12}, 12)}, 1e-12);
  expect_same([g](const V& v) { return swiglu_linear(v[0], v[1], v[2], g); },
              [](const V& v) {
                Tensor a = mul(gelu(slice(v[0], -1, 0, 5), GeluApprox::Tanh), slice(v[0], -1, 5, 10));
                return linear(a, v[1], v[2]);
              },
              {rand64({4, 10}, 13), rand64({3, 5}, 14), rand64({3}, 15)}, 1e-12);
  // Silu is still the default, and differs.
  Tensor a = rand64({2, 4}, 16), b = rand64({2, 4}, 17);
  EXPECT_GT(std::abs(swiglu(a, b).to_double_vector()[1] - swiglu(a, b, g).to_double_vector()[1]), 1e-4);
}

TEST(GemmaKernels, GegluRoundsTheActivationInBf16) {
  Tensor g = rand64({5, 24}, 18), u = rand64({5, 24}, 19);
  NoGradGuard ng;
  const Tensor gb = cast(g, DType::BF16), ub = cast(u, DType::BF16);
  // transformers: act_fn(gate) rounded to bf16, then the product rounded to bf16.
  const Tensor act = cast(cast(gelu(cast(gb, DType::F64), GeluApprox::Tanh), DType::BF16), DType::F64);
  const std::vector<double> want = cast(cast(mul(act, cast(ub, DType::F64)), DType::BF16), DType::F64).to_double_vector();
  const std::vector<double> got = swiglu(gb, ub, GateAct::GeluTanh).to_double_vector();
  // Two bf16 steps: f32 and f64 may round the activation to neighbouring bf16 values.
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * 0.016 + 1e-30) << i;
}

}  // namespace
