// Stochastic rounding of 16-bit parameter updates (Optimizer::set_stochastic_rounding,
// --stochastic-rounding). random.h's rounding functions: only ever one of the two neighbours,
// unbiased, inf/NaN and representable values unchanged. Through the optimizers (CPU): an update
// under half an ulp never moves a parameter when rounding to nearest and moves it in expectation
// with stochastic rounding; the same seed gives the same bits and a resumed optimizer draws what
// the uninterrupted one drew; no extra allocation. cuda (skipped without a GPU): parameters
// bit-identical to the CPU's for every optimizer, bf16 and f16, across launch tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"
#include "leantrain/random.h"
#include "optim_test_values.h"

using namespace lt;

namespace {

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// bf16 neighbours of x (x > 0, finite): truncation and truncation + 1 ulp.
std::pair<float, float> bf16_neighbours(float x) {
  const uint32_t lo = float_bits(x) & 0xffff0000u;
  return {bits_to_float(lo), bits_to_float(lo + 0x10000u)};
}
// f16 neighbours of x (0 < x < 65504): by f16's spacing at x.
std::pair<float, float> f16_neighbours(float x) {
  int e = int(std::floor(std::log2(x)));
  if (e < -14) e = -14;
  const double ulp = std::ldexp(1.0, e - 10);
  const double lo = std::floor(double(x) / ulp) * ulp;
  return {float(lo), float(lo + ulp)};
}

void expect_unbiased(float x, bool bf16) {
  const auto [lo, hi] = bf16 ? bf16_neighbours(x) : f16_neighbours(x);
  ASSERT_LT(lo, x);
  ASSERT_GT(hi, x);
  const int n = 200000;
  const uint64_t stream = sr_stream(7, 3, 11);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t r = rng_bits32(stream, uint64_t(i));
    const float y = bf16 ? sr_round_bf16(x, r) : sr_round_f16(x, r);
    ASSERT_TRUE(y == lo || y == hi) << x << " rounded to " << y << ", not " << lo << " or " << hi;
    sum += y;
  }
  const double p = (double(x) - lo) / (double(hi) - lo);  // probability of rounding up
  const double sd_mean = (double(hi) - lo) * std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(sum / n, double(x), 5 * sd_mean + 1e-7 * (double(hi) - lo)) << (bf16 ? "bf16 " : "f16 ") << x;
}

TEST(StochasticRounding, Bf16OnlyNeighboursAndUnbiased) {
  for (float x : {1.0f + 0.3f / 128, 1.0f + 0.01f / 128, 1.0f + 0.97f / 128, 3.14159f, 1e-3f, 7.7e-20f, 123456.7f, 1e-39f})
    expect_unbiased(x, true);
  for (float x : {-1.0f - 0.3f / 128, -2.71828f}) {  // symmetric: round |x|, keep the sign
    const auto [lo, hi] = bf16_neighbours(-x);
    for (uint32_t i = 0; i < 1000; ++i) {
      const float y = sr_round_bf16(x, rng_bits32(5, i));
      EXPECT_TRUE(y == -lo || y == -hi) << y;
    }
  }
}

TEST(StochasticRounding, F16OnlyNeighboursAndUnbiased) {
  // normals, f16 subnormals (spacing 2^-24), under the smallest subnormal, near the top
  for (float x : {1.0f + 0.3f / 1024, 1.0f + 0.02f / 1024, 3.14159f, 1e-3f, 3.3e-6f, 2e-8f, 1e-30f, 60000.3f})
    expect_unbiased(x, false);
  const float y = sr_round_f16(-3.14159f, rng_bits32(1, 2));
  const auto [lo, hi] = f16_neighbours(3.14159f);
  EXPECT_TRUE(y == -lo || y == -hi);
}

TEST(StochasticRounding, SpecialAndRepresentableValuesUnchanged) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t i = 0; i < 2000; ++i) {
    const uint32_t r = rng_bits32(99, i);
    EXPECT_EQ(sr_round_bf16(inf, r), inf);
    EXPECT_EQ(sr_round_bf16(-inf, r), -inf);
    EXPECT_TRUE(std::isnan(sr_round_bf16(std::nanf(""), r)));
    EXPECT_EQ(sr_round_f16(inf, r), inf);
    EXPECT_TRUE(std::isnan(sr_round_f16(std::nanf(""), r)));
    for (float v : {0.0f, 1.0f, -1.5f, 0.0078125f, 1024.0f, 65280.0f}) {  // in both formats
      EXPECT_EQ(sr_round_bf16(v, r), v);
      EXPECT_EQ(sr_round_f16(v, r), v);
    }
    EXPECT_EQ(sr_round_f16(65504.0f, r), 65504.0f);       // the largest f16
    EXPECT_EQ(sr_round_f16(5.9604645e-8f, r), 5.9604645e-8f);  // the smallest f16 subnormal, 2^-24
    EXPECT_TRUE(std::signbit(sr_round_bf16(-0.0f, r)));
    EXPECT_TRUE(std::signbit(sr_round_f16(-0.0f, r)));
  }
  // A carry past the largest finite bf16 gives inf, as rounding up should.
  const float top = bits_to_float(0x7f7fffffu);  // largest f32: between bf16 max and inf
  bool saw_inf = false;
  for (uint32_t i = 0; i < 100; ++i) saw_inf |= std::isinf(sr_round_bf16(top, rng_bits32(3, i)));
  EXPECT_TRUE(saw_inf);
}

// ---- through the optimizers ----

OptimizerConfig opt_cfg(const std::string& name, double lr, bool sr, uint64_t seed = 1) {
  OptimizerConfig c;
  c.kind = *choice_named<OptimizerKind>(name);
  c.lr = lr;
  c.weight_decay = 0;
  c.stochastic_rounding = sr;
  c.seed = seed;
  return c;
}

const char* const kOptimizers[] = {"sgd", "adamw", "lion", "adamw8bit", "lion8bit"};

// n parameters of value 1 and gradients 1, `steps` steps; returns the parameter values.
std::vector<double> ones_run(const std::string& name, DType dt, double lr, bool sr, int steps, int64_t n = 8192) {
  Tensor p = full({n}, 1.0, dt, Device::cpu()).set_requires_grad(true);
  auto opt = make_optimizer(opt_cfg(name, lr, sr), {{{{"w", p}}, {}}});
  for (int s = 0; s < steps; ++s) {
    p.set_grad(full({n}, 1.0, dt, Device::cpu()));
    opt->step();
  }
  return p.to_double_vector();
}

TEST(StochasticRounding, UpdateUnderHalfUlpMovesOnlyInExpectation) {
  for (DType dt : {DType::BF16, DType::F16}) {
    // Below 1 the spacing is 2^-8 (bf16) or 2^-11 (f16): an update of a quarter of it.
    const double ulp = dt == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const double lr = ulp / 4;
    for (const char* name : kOptimizers) {
      const std::string what = std::string(name) + " " + dtype_name(dt);
      const int steps = 8;
      // The f32 trajectory is the expectation.
      const double want = ones_run(name, DType::F32, lr, false, steps, 8)[0];
      ASSERT_LT(want, 1.0 - 0.5 * steps * lr) << what;
      for (double v : ones_run(name, dt, lr, false, steps)) ASSERT_EQ(v, 1.0) << what << ": round to nearest never moves it";
      const std::vector<double> got = ones_run(name, dt, lr, true, steps);
      double sum = 0;
      for (double v : got) {
        ASSERT_EQ(std::fmod((1.0 - v) / ulp, 1.0), 0.0) << what << ": " << v << " is not on the grid below 1";
        ASSERT_LE(v, 1.0) << what;
        ASSERT_GE(v, 1.0 - steps * ulp) << what;
        sum += v;
      }
      // Each step rounds with variance <= ulp^2/4; the mean over n elements is within 5 sd.
      const double sd = ulp * std::sqrt(steps * 0.25 / double(got.size()));
      EXPECT_NEAR(sum / double(got.size()), want, 5 * sd) << what;
    }
  }
}

// Varied values and gradients over several tensors; returns every parameter's values.
std::vector<Shape> mixed_shapes() { return {{64, 128}, {5000}, {0}, {4096}, {300}, {1}, {16385}}; }
std::vector<Shape> many_shapes() {  // more tensors than one CUDA launch table holds (256 / 320)
  std::vector<Shape> s;
  for (int k = 0; k < 330; ++k) s.push_back({100 + 7 * k});
  return s;
}
using optim_test::values;

struct SrRun {
  std::vector<std::vector<double>> params;
  int64_t allocated = 0;
};
SrRun varied_run(const OptimizerConfig& c, DType dt, const std::vector<Shape>& shapes, Device dev, int steps,
               int64_t min_8bit = 4096) {
  OptimizerConfig cfg = c;
  cfg.min_8bit_size = min_8bit;
  cfg.weight_decay = 0.05;
  std::vector<NamedTensor> ps;
  for (size_t k = 0; k < shapes.size(); ++k)
    ps.push_back({"p" + std::to_string(k),
                  to_device(from_vector(values(numel(shapes[k]), int(k), -1), shapes[k], dt), dev).set_requires_grad(true)});
  auto opt = make_optimizer(cfg, {{ps, {}}});
  SrRun r;
  for (int t = 0; t < steps; ++t) {
    for (size_t k = 0; k < ps.size(); ++k)
      ps[k].second.set_grad(to_device(from_vector(values(numel(shapes[k]), int(k), t), shapes[k], dt), dev));
    opt->step(0.75f);
  }
  r.allocated = opt->state_bytes();
  for (auto& [name, p] : ps) r.params.push_back(p.to_double_vector());
  return r;
}

TEST(StochasticRounding, ReproducibleAndKeyedOnSeed) {
  const auto a = varied_run(opt_cfg("adamw", 1e-3, true, 5), DType::BF16, mixed_shapes(), Device::cpu(), 2);
  const auto b = varied_run(opt_cfg("adamw", 1e-3, true, 5), DType::BF16, mixed_shapes(), Device::cpu(), 2);
  const auto c = varied_run(opt_cfg("adamw", 1e-3, true, 6), DType::BF16, mixed_shapes(), Device::cpu(), 2);
  const auto rn = varied_run(opt_cfg("adamw", 1e-3, false), DType::BF16, mixed_shapes(), Device::cpu(), 2);
  EXPECT_EQ(a.params, b.params);
  EXPECT_NE(a.params, c.params);
  EXPECT_NE(a.params, rn.params);
  EXPECT_EQ(a.allocated, rn.allocated) << "stochastic rounding allocates nothing";
}

TEST(StochasticRounding, ResumedOptimizerDrawsTheSameBits) {
  for (const char* name : kOptimizers) {
    const Shape shape{8192};
    auto make = [&](Tensor& p, const std::vector<float>& init) {
      p = from_vector(init, shape, DType::BF16).set_requires_grad(true);
      return make_optimizer(opt_cfg(name, 1e-3, true, 9), {{{{"w", p}}, {}}});
    };
    auto grad = [&](int t) { return from_vector(values(8192, 2, t), shape, DType::BF16); };
    Tensor p1, p2, p3;
    auto o1 = make(p1, values(8192, 1, -1));
    for (int t = 0; t < 3; ++t) {
      p1.set_grad(grad(t));
      o1->step();
    }
    auto o2 = make(p2, values(8192, 1, -1));
    p2.set_grad(grad(0));
    o2->step();
    const OptimizerStateDict sd = o2->state_dict();
    const std::vector<double> after_one = p2.to_double_vector();
    auto o3 = make(p3, std::vector<float>(after_one.begin(), after_one.end()));  // bf16 values: exact
    o3->load_state_dict(sd);
    for (int t = 1; t < 3; ++t) {
      p3.set_grad(grad(t));
      o3->step();
    }
    EXPECT_EQ(p1.to_double_vector(), p3.to_double_vector()) << name;
  }
}

TEST(StochasticRounding, RefusedWithMasterWeights) {
  Tensor p = full({4}, 1.0, DType::BF16, Device::cpu()).set_requires_grad(true);
  OptimizerConfig c = opt_cfg("adamw", 1e-3, true);
  c.master_weights = true;
  EXPECT_THROW(make_optimizer(c, {{{{"w", p}}, {}}}), Error);
  auto o = make_optimizer(opt_cfg("adamw", 1e-3, true), {{{{"w", p}}, {}}});
  EXPECT_THROW(o->set_master_weights(true), Error);
}

// CPU == CUDA, bit for bit, for every optimizer (skipped without a GPU).
TEST(StochasticRoundingCuda, MatchesCpuBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const char* name : kOptimizers) {
      const bool q8 = std::string(name).find("8bit") != std::string::npos;
      // 8-bit: one step, since a code may be picked differently after it (see test_optim_lean_backends).
      const int steps = q8 ? 1 : 3;
      for (bool many : {false, true}) {
        const auto shapes = many ? many_shapes() : mixed_shapes();
        const OptimizerConfig c = opt_cfg(name, 1e-3, true, 42);
        const int64_t min_8bit = many ? 256 : 4096;
        const SrRun cpu = varied_run(c, dt, shapes, Device::cpu(), steps, min_8bit);
        const SrRun gpu = varied_run(c, dt, shapes, Device::cuda(), steps, min_8bit);
        ASSERT_EQ(cpu.params.size(), gpu.params.size());
        for (size_t k = 0; k < cpu.params.size(); ++k) {
          ASSERT_EQ(cpu.params[k].size(), gpu.params[k].size());
          size_t diff = 0;
          for (size_t i = 0; i < cpu.params[k].size(); ++i) diff += cpu.params[k][i] != gpu.params[k][i];
          EXPECT_EQ(diff, 0u) << name << " " << dtype_name(dt) << (many ? " many" : " mixed") << " p" << k;
        }
      }
    }
  }
}

}  // namespace
