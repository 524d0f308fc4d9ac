// Optimizer updates against float64 reference formulas written out here, over several steps,
// two parameters per group (one multi-tensor backend call) and a parameter that skips a step.
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

using namespace lt;

namespace {

// The backend args carry hyperparameters as float: the reference uses the same rounded values.
double f(double x) { return double(float(x)); }

// Deterministic gradient value for (step, param, index).
double grad_value(int step, int param, int i) { return std::sin(0.7 * step + 1.3 * param + 0.37 * i) * (1 + param); }

struct Fixture {
  std::vector<std::vector<double>> init{{0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {0.1, -0.2, 0.3}};
  std::vector<Shape> shapes{{2, 3}, {3}};
  std::vector<NamedTensor> params;
  Fixture() {
    for (size_t k = 0; k < init.size(); ++k)
      params.push_back({"p" + std::to_string(k), from_vector(init[k], shapes[k], DType::F64).set_requires_grad(true)});
  }
  // Sets the grads of `step`; param 1 gets none at `skip_step` (so it is skipped then).
  void set_grads(int step, int skip_step = -1) {
    for (size_t k = 0; k < params.size(); ++k) {
      if (int(k) == 1 && step == skip_step) {
        params[k].second.set_grad(Tensor());
        continue;
      }
      std::vector<double> g(init[k].size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(step, int(k), int(i));
      params[k].second.set_grad(from_vector(g, shapes[k], DType::F64));
    }
  }
};

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "index " << i;
}

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov;
  float grad_scale;
};

void run_sgd(const SgdCase& c) {
  Fixture fx;
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = c.momentum;
  o.dampening = c.dampening;
  o.weight_decay = c.weight_decay;
  o.nesterov = c.nesterov;
  SGD opt(fx.params, o);
  const double lr = f(o.lr), mom = f(c.momentum), damp = f(c.dampening), wd = f(c.weight_decay), gs = c.grad_scale;
  auto ref = fx.init;
  std::vector<std::vector<double>> buf(2);
  std::vector<int> steps(2, 0);
  const int skip = 2;
  for (int t = 0; t < 5; ++t) {
    fx.set_grads(t, skip);
    opt.step(c.grad_scale);
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && t == skip) continue;
      auto& p = ref[size_t(k)];
      if (buf[size_t(k)].empty()) buf[size_t(k)].assign(p.size(), 0);
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grad_value(t, k, int(i)) * gs + wd * p[i];
        if (mom != 0) {
          double& b = buf[size_t(k)][i];
          b = steps[size_t(k)] == 0 ? g : mom * b + (1 - damp) * g;
          g = c.nesterov ? g + mom * b : b;
        }
        p[i] -= lr * g;
      }
      ++steps[size_t(k)];
    }
    for (int k = 0; k < 2; ++k) expect_close(fx.params[size_t(k)].second.to_double_vector(), ref[size_t(k)], 1e-13);
  }
  EXPECT_EQ(opt.step_count(), 5);
}

}  // namespace

TEST(OptimSgd, Plain) { run_sgd({0, 0, 0, false, 1.0f}); }
TEST(OptimSgd, Momentum) { run_sgd({0.9, 0, 0, false, 1.0f}); }
TEST(OptimSgd, MomentumDampening) { run_sgd({0.9, 0.3, 0, false, 1.0f}); }
TEST(OptimSgd, Nesterov) { run_sgd({0.9, 0, 0, true, 1.0f}); }
TEST(OptimSgd, WeightDecayNesterovGradScale) { run_sgd({0.8, 0, 0.05, true, 0.5f}); }
TEST(OptimSgd, WeightDecayNoMomentum) { run_sgd({0, 0, 0.1, false, 1.0f}); }

TEST(OptimSgd, RejectsNesterovWithoutMomentum) {
  Fixture fx;
  SgdOptions o;
  o.nesterov = true;
  EXPECT_THROW(SGD(fx.params, o), Error);
}

TEST(OptimAdamW, MatchesReferenceWithWeightDecay) {
  Fixture fx;
  AdamWOptions o;
  o.lr = 0.05;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-3;  // large, so eps inside vs outside the sqrt would show
  o.weight_decay = 0.1;
  AdamW opt(fx.params, o);
  const double lr = f(o.lr), b1 = f(o.beta1), b2 = f(o.beta2), eps = f(o.eps), wd = f(o.weight_decay);
  const float gs = 0.75f;
  auto ref = fx.init;
  std::vector<std::vector<double>> m{std::vector<double>(6), std::vector<double>(3)}, v = m;
  std::vector<int> steps(2, 0);
  const int skip = 1;  // param 1 misses step 1: its bias correction lags by one from then on
  for (int t = 0; t < 6; ++t) {
    fx.set_grads(t, skip);
    opt.step(gs);
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && t == skip) continue;
      int n = ++steps[size_t(k)];
      auto& p = ref[size_t(k)];
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grad_value(t, k, int(i)) * gs;
        p[i] -= lr * wd * p[i];
        m[size_t(k)][i] = b1 * m[size_t(k)][i] + (1 - b1) * g;
        v[size_t(k)][i] = b2 * v[size_t(k)][i] + (1 - b2) * g * g;
        double mhat = m[size_t(k)][i] / (1 - std::pow(b1, n));
        double vhat = v[size_t(k)][i] / (1 - std::pow(b2, n));
        p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    for (int k = 0; k < 2; ++k) expect_close(fx.params[size_t(k)].second.to_double_vector(), ref[size_t(k)], 1e-13);
  }
  EXPECT_EQ(opt.step_count(), 6);
  OptimizerStateDict sd = opt.state_dict();
  EXPECT_EQ(sd.tensors.at("p1.step").item(), 5);
  expect_close(sd.tensors.at("p0.exp_avg").to_double_vector(), m[0], 1e-13);
  expect_close(sd.tensors.at("p1.exp_avg_sq").to_double_vector(), v[1], 1e-13);
}

// f32 and bf16 storage run the same update within their precision.
TEST(OptimAdamW, Float32AndBf16StatesTrackFloat64) {
  AdamWOptions o;
  o.lr = 0.01;
  std::vector<std::vector<double>> finals;
  for (DType pd : {DType::F64, DType::F32}) {
    for (bool bf16_state : {false, true}) {
      if (pd == DType::F64 && bf16_state) continue;
      Tensor w = from_vector(std::vector<double>{1, -2, 3, -4}, {4}, pd).set_requires_grad(true);
      AdamWOptions oo = o;
      if (bf16_state) oo.state_dtype = DType::BF16;
      AdamW opt(std::vector<NamedTensor>{{"w", w}}, oo);
      for (int t = 0; t < 4; ++t) {
        w.set_grad(from_vector(std::vector<double>{0.1 * t, -0.2, 0.3, 0.05 * t}, {4}, pd));
        opt.step();
      }
      if (bf16_state) EXPECT_EQ(opt.state_dict().tensors.at("w.exp_avg").dtype(), DType::BF16);
      finals.push_back(w.to_double_vector());
    }
  }
  expect_close(finals[1], finals[0], 1e-6);
  expect_close(finals[2], finals[0], 1e-3);
}

TEST(OptimAdamW, StateIsLazyAndTagged) {
  Fixture fx;
  AdamW opt(fx.params, AdamWOptions{});
  EXPECT_EQ(opt.state_bytes(), 0);
  auto& alloc = allocator_for(Device::cpu());
  int64_t before = alloc.stats().category[size_t(Category::OptimizerState)].current;
  fx.set_grads(0);
  opt.step();
  EXPECT_EQ(opt.state_bytes(), 2 * (6 + 3) * 8);
  int64_t grown = alloc.stats().category[size_t(Category::OptimizerState)].current - before;
  EXPECT_EQ(grown, 2 * round_allocation(6 * 8) + 2 * round_allocation(3 * 8));
  for (auto& [k, t] : opt.state_dict().tensors)
    if (k.find(".step") == std::string::npos) EXPECT_EQ(t.category(), Category::OptimizerState) << k;
}

TEST(OptimAdamW, ParametersWithoutGradAreSkipped) {
  Fixture fx;
  AdamW opt(fx.params, AdamWOptions{});
  fx.set_grads(0, /*skip_step=*/0);
  auto p1 = fx.params[1].second.to_double_vector();
  opt.step();
  EXPECT_EQ(fx.params[1].second.to_double_vector(), p1);
  EXPECT_EQ(opt.state_dict().tensors.count("p1.exp_avg"), 0u);
  EXPECT_EQ(opt.state_bytes(), 2 * 6 * 8);
}

// On the meta device (dry runs) the step allocates the same state and computes nothing.
TEST(OptimAdamW, MetaDeviceAllocatesState) {
  Tensor w = empty({16, 8}, DType::F32, Device::meta()).set_requires_grad(true);
  w.set_grad(empty({16, 8}, DType::F32, Device::meta()));
  AdamW opt(std::vector<NamedTensor>{{"w", w}}, AdamWOptions{});
  opt.step();
  EXPECT_EQ(opt.state_bytes(), 2 * 16 * 8 * 4);
  EXPECT_TRUE(opt.state_dict().tensors.at("w.exp_avg").device().is_meta());
}

// Stepping each parameter from its post-accumulate-grad hook (the fused step) matches step().
TEST(OptimAdamW, StepParamFromHookMatchesStep) {
  auto run = [](bool fused) {
    Tensor w = from_vector(std::vector<double>{1, 2, 3}, {3}, DType::F64).set_requires_grad(true);
    Tensor b = from_vector(std::vector<double>{-1}, {1}, DType::F64).set_requires_grad(true);
    AdamW opt(std::vector<NamedTensor>{{"w", w}, {"b", b}}, AdamWOptions{});
    if (fused)
      for (Tensor p : {w, b})
        p.register_post_accumulate_grad_hook([&opt](Tensor& param) {
          opt.step_param(param);
          param.set_grad(Tensor());  // no gradient buffer is kept
        });
    Tensor x = from_vector(std::vector<double>{0.5, -1, 2}, {3}, DType::F64);
    for (int t = 0; t < 3; ++t) {
      Tensor loss = sum_all(add(mul(mul(w, w), x), b));
      loss.backward();
      if (!fused) {
        opt.step();
        opt.zero_grad();
      }
      EXPECT_FALSE(w.grad().defined());
    }
    EXPECT_EQ(opt.step_count(), 3);
    auto out = w.to_double_vector();
    out.push_back(b.item());
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}
