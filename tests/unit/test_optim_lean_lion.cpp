// Lion against its float64 formula written out here, over several steps, with a parameter that
// skips a step; f32 and bf16 states; the factory and a state-dict round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"

using namespace lt;

namespace {

double f(double x) { return double(float(x)); }  // hyperparameters reach the kernel as float
double grad_value(int step, int param, int i) { return std::sin(0.9 * step + 1.7 * param + 0.41 * i) * (1 + param); }
double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "index " << i;
}

std::vector<NamedTensor> make_params(DType dt) {
  return {{"w", from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {2, 3}, dt).set_requires_grad(true)},
          {"b", from_vector(std::vector<double>{0.1, -0.2, 0.3}, {3}, dt).set_requires_grad(true)}};
}

void set_grads(std::vector<NamedTensor>& ps, int t, int skip_step = -1) {
  for (size_t k = 0; k < ps.size(); ++k) {
    Tensor& p = ps[k].second;
    if (k == 1 && t == skip_step) {
      p.set_grad(Tensor());
      continue;
    }
    std::vector<double> g(size_t(p.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(t, int(k), int(i));
    p.set_grad(from_vector(g, p.shape(), p.dtype()));
  }
}

}  // namespace

TEST(OptimLion, MatchesFloat64Reference) {
  auto ps = make_params(DType::F64);
  LionOptions o;
  o.lr = 0.03;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.weight_decay = 0.2;
  Lion opt(ps, o);
  const double lr = f(o.lr), b1 = f(o.beta1), b2 = f(o.beta2), wd = f(o.weight_decay);
  const float gs = 0.5f;
  std::vector<std::vector<double>> ref{ps[0].second.to_double_vector(), ps[1].second.to_double_vector()};
  std::vector<std::vector<double>> m{std::vector<double>(6), std::vector<double>(3)};
  const int skip = 2;
  for (int t = 0; t < 6; ++t) {
    set_grads(ps, t, skip);
    opt.step(gs);
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && t == skip) continue;
      for (size_t i = 0; i < ref[size_t(k)].size(); ++i) {
        const double g = grad_value(t, k, int(i)) * gs;
        double& mi = m[size_t(k)][i];
        double& p = ref[size_t(k)][i];
        p = p * (1 - lr * wd) - lr * sign(b1 * mi + (1 - b1) * g);
        mi = b2 * mi + (1 - b2) * g;
      }
    }
    for (int k = 0; k < 2; ++k) expect_close(ps[size_t(k)].second.to_double_vector(), ref[size_t(k)], 1e-13);
  }
  EXPECT_EQ(opt.step_count(), 6);
  OptimizerStateDict sd = opt.state_dict();
  EXPECT_EQ(sd.tensors.at("b.step").item(), 5);
  expect_close(sd.tensors.at("w.exp_avg").to_double_vector(), m[0], 1e-13);
  expect_close(sd.tensors.at("b.exp_avg").to_double_vector(), m[1], 1e-13);
}

// Every coordinate moves by exactly lr per step (no weight decay), whatever the gradient's size.
TEST(OptimLion, StepIsLrTimesSign) {
  Tensor w = from_vector(std::vector<double>{1, 1, 1, 1}, {4}, DType::F64).set_requires_grad(true);
  Lion opt(std::vector<NamedTensor>{{"w", w}}, LionOptions{});
  w.set_grad(from_vector(std::vector<double>{1e-6, -3e4, 0, 2}, {4}, DType::F64));
  opt.step();
  const double lr = f(1e-4);
  expect_close(w.to_double_vector(), {1 - lr, 1 + lr, 1, 1 - lr}, 1e-15);
}

// f32 and bf16 states follow the f64 run (sign() forgives small state errors).
TEST(OptimLion, Float32AndBf16StatesTrackFloat64) {
  std::vector<std::vector<double>> finals;
  for (auto [pd, sd] : {std::pair{DType::F64, DType::F64}, {DType::F32, DType::F32}, {DType::F32, DType::BF16}}) {
    auto ps = make_params(pd);
    LionOptions o;
    o.lr = 0.01;
    o.state_dtype = sd;
    Lion opt(ps, o);
    for (int t = 0; t < 5; ++t) {
      set_grads(ps, t);
      opt.step();
    }
    EXPECT_EQ(opt.state_dict().tensors.at("w.exp_avg").dtype(), sd);
    EXPECT_EQ(opt.state_bytes(), 9 * int64_t(dtype_size(sd)));
    finals.push_back(ps[0].second.to_double_vector());
  }
  expect_close(finals[1], finals[0], 1e-6);
  expect_close(finals[2], finals[0], 1e-6);
}

TEST(OptimLion, FactoryAndStateDictResume) {
  auto run = [](int resume_at) {
    auto ps = make_params(DType::F32);
    OptimizerConfig c;
    c.kind = *choice_named<OptimizerKind>("lion");
    c.lr = 0.02;
    c.weight_decay = 0.1;
    c.state_dtype = DType::BF16;
    auto opt = make_optimizer(c, decay_groups(ps));
    EXPECT_STREQ(opt->name(), "lion");
    EXPECT_DOUBLE_EQ(dynamic_cast<Lion&>(*opt).options().beta2, 0.99);
    for (int t = 0; t < 5; ++t) {
      if (t == resume_at) {
        OptimizerStateDict sd = opt->state_dict();
        auto fresh = make_params(DType::F32);
        for (size_t k = 0; k < ps.size(); ++k) copy_(fresh[k].second, ps[k].second);
        ps = fresh;
        opt = make_optimizer(c, decay_groups(ps));
        opt->load_state_dict(sd);
      }
      set_grads(ps, t);
      opt->step();
    }
    return ps[0].second.to_double_vector();
  };
  EXPECT_EQ(run(3), run(-1));
}

TEST(OptimLion, RejectsBadOptions) {
  auto ps = make_params(DType::F32);
  LionOptions o;
  o.beta2 = 1.0;
  EXPECT_THROW(Lion(ps, o), Error);
  o = LionOptions{};
  o.state_dtype = DType::I32;
  EXPECT_THROW(Lion(ps, o), Error);
}
