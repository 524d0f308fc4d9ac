// Under autocast a linear's or a norm's weight and bias are recorded casts of f32 parameters;
// their gradients skip the casts (past_f32_cast, param_grad_targets): the weight-gradient GEMM
// or the norm's column sums write f32 themselves. Checked here: the f32 gradient is the f32 product of the 16-bit operands, bit for
// bit on the CPU, and not its 16-bit rounding; every linear-family op takes the route and gives
// what the route through the casts gives, to 16-bit rounding; what is not a whole cast of f32
// keeps the old route; the backends' 16-bit-into-f32 GEMM and sums; and, with a GPU, CUDA's
// gradients against the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/device.h"
#include "leantrain/ops.h"
#include "ops/linear_args.h"

using namespace lt;

namespace {

// A parameter: f32 values that bf16 holds exactly, so both routes start from the same operands.
Tensor param(const Shape& s, uint64_t seed, Device dev = Device::cpu()) {
  Generator g(seed);
  Tensor t = cast(cast(randn(s, g, 0.5f, DType::F32), DType::BF16), DType::F32).to(dev).detach();
  t.set_requires_grad(true);
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_float_vector(); }

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
}

// One op's forward under bf16 autocast and its backward with a fixed upstream gradient; the
// gradients of `params` (f32 leaves), read back.
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
std::vector<std::vector<float>> grads_of(const OpFn& op, const std::vector<Tensor>& params) {
  AutocastGuard bf16(DType::BF16);
  Tensor y = op(params);
  EXPECT_EQ(y.dtype(), DType::BF16);
  Generator g(99);
  Tensor gy = randn(y.shape(), g, 1.0f, y.dtype(), y.device());
  y.backward(gy);
  std::vector<std::vector<float>> r;
  for (const Tensor& p : params) {
    EXPECT_TRUE(p.grad().defined());
    if (!p.grad().defined()) return r;
    EXPECT_EQ(p.grad().dtype(), DType::F32);
    r.push_back(values(p.grad()));
  }
  return r;
}

struct Case {
  const char* name;
  std::vector<Shape> shapes;  // the op's inputs: an activation first, then its parameters
  OpFn op;                    // autocast()s what it takes, as nn/ does
};

std::vector<Case> cases() {
  auto ac = [](const Tensor& t) { return autocast(t); };
  return {
      {"linear", {{2, 8, 32}, {48, 32}, {48}}, [=](const auto& p) { return linear(ac(p[0]), ac(p[1]), ac(p[2])); }},
      {"linear_in_out", {{16, 32}, {32, 24}, {24}},
       [=](const auto& p) { return linear(ac(p[0]), ac(p[1]), ac(p[2]), true); }},
      {"linear_nobias", {{16, 32}, {24, 32}}, [=](const auto& p) { return linear(ac(p[0]), ac(p[1]), Tensor()); }},
      // sizes no multiple of 8: the GPU's bias-gradient epilogue does not apply (gemm, then sums)
      {"linear_odd", {{3, 7, 13}, {11, 13}, {11}}, [=](const auto& p) { return linear(ac(p[0]), ac(p[1]), ac(p[2])); }},
      {"linear_gelu_parts_then_gelu_linear", {{2, 8, 32}, {64, 32}, {64}, {32, 64}, {32}},
       [=](const auto& p) {
         LinearGelu h = linear_gelu_parts(ac(p[0]), ac(p[1]), ac(p[2]), GeluApprox::Tanh);
         return gelu_linear(h.pre, ac(p[3]), ac(p[4]), GeluApprox::Tanh, false, h.act, true);
       }},
      {"gelu_linear_erf", {{16, 24}, {8, 24}, {8}},
       [=](const auto& p) { return gelu_linear(ac(p[0]), ac(p[1]), ac(p[2]), GeluApprox::Erf); }},
      {"layer_norm_linear", {{2, 8, 32}, {32}, {32}, {40, 32}, {40}},
       [=](const auto& p) {
         Tensor x = ac(p[0]);
         return layer_norm_linear(x, autocast_like(p[1], x), autocast_like(p[2], x), 1e-5, ac(p[3]), ac(p[4]));
       }},
      {"attention_linear", {{2, 8, 96}, {32, 32}, {32}},
       [=](const auto& p) { return attention_linear(ac(p[0]), 4, 4, true, Tensor(), ac(p[1]), ac(p[2])); }},
      {"swiglu_linear", {{16, 64}, {24, 32}}, [=](const auto& p) { return swiglu_linear(ac(p[0]), ac(p[1]), Tensor()); }},
      // norms: their weight and bias are autocast_like casts; dw, db come out of the kernels in f32
      {"layer_norm", {{2, 40, 32}, {32}, {32}},
       [=](const auto& p) {
         Tensor x = ac(p[0]);
         return layer_norm(x, autocast_like(p[1], x), autocast_like(p[2], x));
       }},
      {"rms_norm", {{3, 24, 16}, {16}},
       [=](const auto& p) {
         Tensor x = ac(p[0]);
         return rms_norm(x, autocast_like(p[1], x));
       }},
      {"add_layer_norm", {{2, 24, 32}, {2, 24, 32}, {32}, {32}},
       [=](const auto& p) {
         Tensor x = ac(p[0]);
         AddNormResult r = add_layer_norm(x, ac(p[1]), autocast_like(p[2], x), autocast_like(p[3], x));
         return add(r.sum, r.y);
       }},
      {"add_rms_norm", {{40, 16}, {40, 16}, {16}},
       [=](const auto& p) {
         Tensor x = ac(p[0]);
         return add_rms_norm(x, ac(p[1]), autocast_like(p[2], x)).y;
       }},
  };
}

std::vector<Tensor> make_params(const Case& c, Device dev) {
  std::vector<Tensor> ps;
  for (size_t i = 0; i < c.shapes.size(); ++i) ps.push_back(param(c.shapes[i], 10 + i, dev));
  return ps;
}

// The same op with every parameter first cast by hand to a bf16 leaf: its gradients are the
// 16-bit products the casts used to round, widened afterwards.
std::vector<std::vector<float>> rounded_grads_of(const Case& c) {
  std::vector<Tensor> f32 = make_params(c, Device::cpu());
  std::vector<Tensor> b16;
  for (const Tensor& p : f32) {
    Tensor t = cast(p, DType::BF16).detach();
    t.set_requires_grad(true);
    b16.push_back(t);
  }
  Tensor y = c.op(b16);
  Generator g(99);
  y.backward(randn(y.shape(), g, 1.0f, y.dtype(), y.device()));
  std::vector<std::vector<float>> r;
  for (const Tensor& p : b16) r.push_back(values(cast(p.grad(), DType::F32)));
  return r;
}

}  // namespace

TEST(F32WeightGrads, LinearWeightGradientIsTheF32ProductBitwise) {
  Tensor x = param({6, 16}, 1), w = param({8, 16}, 2), b = param({8}, 3);
  Generator g(4);
  Tensor gy = randn({6, 8}, g, 1.0f, DType::BF16);
  {
    AutocastGuard bf16(DType::BF16);
    linear(autocast(x), autocast(w), autocast(b)).backward(gy);
  }
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  ASSERT_EQ(b.grad().dtype(), DType::F32);
  // gy^T x in f32 from the same (bf16-exact) values, and gy's column sums in f32
  Tensor gy32 = cast(gy, DType::F32);
  const std::vector<float> want_w = values(matmul(gy32, x, true, false));
  EXPECT_EQ(values(w.grad()), want_w);
  EXPECT_EQ(values(b.grad()), values(sum_to(gy32, {8})));
  // ... which 16 bits would have rounded: the old route's gradient differs somewhere
  EXPECT_NE(values(cast(cast(matmul(gy32, x, true, false), DType::BF16), DType::F32)), want_w);
  // the input's gradient is unchanged: bf16 through its cast
  EXPECT_EQ(x.grad().dtype(), DType::F32);
}

TEST(F32WeightGrads, EveryOpAgreesWithTheRoundedRoute) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<float>> got = grads_of(c.op, make_params(c, Device::cpu()));
    std::vector<std::vector<float>> rounded = rounded_grads_of(c);
    ASSERT_EQ(got.size(), rounded.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("input " + std::to_string(i));
      ASSERT_EQ(got[i].size(), rounded[i].size());
      // within bf16's rounding of the same sums (the recomputed activations are the forward's)
      EXPECT_LE(rel_diff(got[i], rounded[i]), 8e-3);
    }
    // the parameters' gradients (inputs 1..; the add-norms' residual 1 is an activation) are not
    // rounded to bf16: some element of some parameter gradient has bits below bf16's mantissa
    bool finer = false;
    for (size_t i = 1; i < got.size(); ++i)
      for (float v : got[i]) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        finer |= (u & 0xFFFFu) != 0;
      }
    EXPECT_TRUE(finer);
  }
}

TEST(F32WeightGrads, OnlyWholeCastsOfF32AreSkipped) {
  uint64_t seed = 20;
  auto f = [&] { return param({4, 8}, seed++); };  // a fresh parameter per check
  EXPECT_FALSE(past_f32_cast(f()).defined());                          // no cast at all
  EXPECT_FALSE(past_f32_cast(cast(f(), DType::F64)).defined());        // not to 16 bits
  EXPECT_FALSE(past_f32_cast(cast(cast(f(), DType::F16), DType::BF16)).defined());  // from 16 bits
  EXPECT_FALSE(past_f32_cast(slice(cast(f(), DType::F16), 0, 0, 2)).defined());     // a view of a cast
  EXPECT_FALSE(past_f32_cast(cast(f().detach(), DType::BF16)).defined());           // nothing recorded
  Tensor hooked = cast(f(), DType::BF16);
  hooked.impl()->grad_fn->register_pre_hook([](Node&, Tensor&) {});
  EXPECT_FALSE(past_f32_cast(hooked).defined());  // its hook would be skipped
  Tensor p = f();
  Tensor s = past_f32_cast(cast(p, DType::F16));
  ASSERT_TRUE(s.defined());
  EXPECT_EQ(s.dtype(), DType::F32);
  EXPECT_EQ(s.shape(), p.shape());
}

TEST(F32WeightGrads, TiedOrAlreadyConsumedCastsKeepTheirBackward) {
  // A tied table (autocast_tied), or a cast another op already consumes: the gradients would
  // meet at the parameter in f32 (twice the bytes held): the cast stays.
  Tensor p = param({4, 8}, 30);
  {
    AutocastGuard bf16(DType::BF16);
    Tensor tied = autocast_tied(p);
    EXPECT_EQ(tied.dtype(), DType::BF16);
    EXPECT_FALSE(past_f32_cast(tied).defined());
    EXPECT_TRUE(past_f32_cast(autocast(p)).defined());
  }
  Tensor q = param({4, 8}, 31);
  Tensor c = cast(q, DType::BF16);
  Tensor first = scale(c, 2.0);  // the cast already consumed
  EXPECT_FALSE(past_f32_cast(c).defined());
  // the gradients are the same either way: both reach the parameter
  Tensor r = param({6, 8}, 32), x = param({3, 8}, 33);
  Tensor w = cast(r, DType::BF16);
  Tensor y = linear(cast(x, DType::BF16), w, Tensor());
  Tensor z = linear(cast(x, DType::BF16), w, Tensor());  // the second consumer of w: through the cast
  sum_all(cast(add(y, z), DType::F32)).backward();
  ASSERT_EQ(r.grad().dtype(), DType::F32);
  Tensor ones_rows = ones({3, 6}, DType::F32);
  const std::vector<float> one = values(matmul(ones_rows, cast(cast(x, DType::BF16), DType::F32), true, false));
  const std::vector<float> got = values(r.grad());
  ASSERT_EQ(got.size(), one.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], 2 * one[i], 1e-2 * std::abs(one[i]) + 1e-6);
}

TEST(F32WeightGrads, AWeightCastWithAUncastBiasKeepsTheCasts) {
  // A bias that is a bf16 leaf needs a bf16 gradient: both then go the old way (dW through the
  // cast, rounded to bf16 first).
  Tensor x = param({6, 16}, 1), w = param({8, 16}, 2);
  Tensor b = cast(param({8}, 3), DType::BF16).detach();
  b.set_requires_grad(true);
  Generator g(4);
  Tensor gy = randn({6, 8}, g, 1.0f, DType::BF16);
  {
    AutocastGuard bf16(DType::BF16);
    linear(autocast(x), autocast(w), b).backward(gy);
  }
  EXPECT_EQ(b.grad().dtype(), DType::BF16);
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(values(w.grad()), values(cast(cast(matmul(cast(gy, DType::F32), x, true, false), DType::BF16), DType::F32)));
}

TEST(F32WeightGrads, CpuGemmAndSumsTakeSixteenBitIntoF32) {
  Generator g(6);
  Tensor a = randn({5, 7}, g, 1.0f, DType::BF16), b = randn({7, 3}, g, 1.0f, DType::BF16);
  Tensor c = Tensor::empty({5, 3}, DType::F32);
  GemmDesc d;
  d.m = 5, d.n = 3, d.k = 7;
  detail::backend_of(a).gemm(c, a, b, d, Tensor());
  EXPECT_EQ(values(c), values(matmul(cast(a, DType::F32), cast(b, DType::F32))));
  Tensor s = Tensor::empty({1, 3}, DType::F32);
  detail::backend_of(b).reduce_sum(s, b);
  EXPECT_EQ(values(s), values(sum_to(cast(b, DType::F32), {1, 3})));
  // a bias, or mixed operands, is refused with a one-line error
  EXPECT_THROW(detail::backend_of(a).gemm(c, a, b, d, zeros({3}, DType::F32)), Error);
  EXPECT_THROW(detail::backend_of(a).gemm(c, a, cast(b, DType::F16), d, Tensor()), Error);
  EXPECT_THROW(detail::backend_of(b).reduce_sum(Tensor::empty({1, 3}, DType::F64), b), Error);
}

TEST(F32WeightGrads, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<float>> cpu = grads_of(c.op, make_params(c, Device::cpu()));
    std::vector<std::vector<float>> gpu = grads_of(c.op, make_params(c, Device::cuda()));
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      SCOPED_TRACE("input " + std::to_string(i));
      // the inputs' gradients are bf16 products, and a recomputed or epilogue GELU rounds its
      // f32 value where the CPU rounds the product first: an ulp here and there everywhere
      // (linear_gelu_parts' fc2 weight: 2.6e-3 on the H200). A wrong layout is off by O(1).
      EXPECT_LE(rel_diff(gpu[i], cpu[i]), 1e-2);
    }
  }
}
