// 8-bit AdamW and Lion against float64 references that apply the same block-wise quantisation:
// each step starts the reference from the kernel's state (codes, absmax, parameters), so every
// step is checked on its own, exact up to f32 rounding; a code may differ only by one position
// where the value sits within rounding of the midpoint of two codes. Also: small tensors keep
// f32 state, exact state bytes, state-dict round trips (through safetensors) and option errors.
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <filesystem>

#include "backend/quant8.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"
#include "leantrain/safetensors.h"
#include "optim/quant_map.h"

using namespace lt;

namespace {

double f(double x) { return double(float(x)); }
double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

// Gradients whose magnitudes spread over 3 decades inside every block.
float grad_value(int t, size_t i) {
  const double frac = std::fmod(0.618034 * double(i) + 0.1 * t, 1.0);
  return float(std::sin(0.37 * double(i) + 1.1 * t) * std::pow(10.0, -3 * frac));
}
Tensor grads_for(const Tensor& p, int t) {
  std::vector<float> g(size_t(p.numel()));
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(t, i);
  return from_vector(g, p.shape(), p.dtype());
}

// One quantised moment as the kernel left it, in double.
struct Moment {
  std::vector<int64_t> codes;
  std::vector<double> absmax;
  const float* map;
  double value(size_t i) const { return double(map[codes[i]]) * absmax[i / size_t(kQuantBlock)]; }
};
Moment read_moment(const OptimizerStateDict& sd, const std::string& key, const float* map) {
  return {sd.tensors.at(key).to_int_vector(), sd.tensors.at(key + "_absmax").to_double_vector(), map};
}

// Checks the kernel's requantisation of `want` (the reference's new moment) against `got`.
void expect_requantised(const std::vector<double>& want, const Moment& got, const std::string& what) {
  const size_t n = want.size();
  int ambiguous = 0;
  for (size_t b = 0; b * size_t(kQuantBlock) < n; ++b) {
    const size_t first = b * size_t(kQuantBlock), last = std::min(n, first + size_t(kQuantBlock));
    double amax = 0;
    for (size_t i = first; i < last; ++i) amax = std::max(amax, std::abs(want[i]));
    ASSERT_NEAR(got.absmax[b], amax, 1e-6 * amax) << what << " block " << b;
    for (size_t i = first; i < last; ++i) {
      const double x = amax > 0 ? want[i] / amax : 0.0;
      int best = 0;  // nearest code in double (upper one on ties, as the kernel)
      for (int c = 1; c < kQuantCodes; ++c)
        if (std::abs(got.map[c] - x) <= std::abs(got.map[best] - x)) best = c;
      const int64_t code = got.codes[i];
      if (code == best) continue;
      const double mid = (double(got.map[code]) + got.map[best]) / 2;
      ASSERT_TRUE(std::abs(code - best) == 1 && std::abs(x - mid) <= 2e-6 * std::abs(x) + 1e-12)
          << what << "[" << i << "]: code " << code << ", nearest " << best << " for " << x;
      ++ambiguous;
    }
  }
  EXPECT_LE(ambiguous, 2) << what;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

// "w" is quantised (20 full blocks and an 80-element tail); "b" keeps f32 moments.
std::vector<NamedTensor> make_params() {
  std::vector<float> w(40 * 130), b(130);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(std::cos(0.11 * double(i)));
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(0.01 * double(i) - 0.5);
  return {{"w", from_vector(w, {40, 130}).set_requires_grad(true)}, {"b", from_vector(b, {130}).set_requires_grad(true)}};
}

}  // namespace

TEST(OptimAdamW8bit, MatchesQuantisedFloat64Reference) {
  auto ps = make_params();
  AdamW8bitOptions o;
  o.lr = 0.01;
  o.beta1 = 0.85;
  o.beta2 = 0.99;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  AdamW8bit opt(ps, o);
  const double lr = f(o.lr), b1 = f(o.beta1), b2 = f(o.beta2), eps = f(o.eps), wd = f(o.weight_decay);
  const float gs = 0.8f;
  const size_t n = size_t(ps[0].second.numel()), nb = size_t(ps[1].second.numel());
  Moment m{std::vector<int64_t>(n), std::vector<double>(quant_blocks(int64_t(n))), dynamic_map_signed()};
  Moment v{m.codes, m.absmax, dynamic_map_unsigned()};
  std::vector<double> mb(nb), vb(nb);
  for (int t = 1; t <= 6; ++t) {
    const std::vector<double> w0 = ps[0].second.to_double_vector(), b0 = ps[1].second.to_double_vector();
    for (auto& [name, p] : ps) p.set_grad(grads_for(p, t));
    opt.step(gs);
    const double step_size = lr / (1 - std::pow(b1, t)), bc2 = std::sqrt(1 - std::pow(b2, t));
    auto adam = [&](double p, double& mi, double& vi, double g) {
      mi = b1 * mi + (1 - b1) * g;
      vi = b2 * vi + (1 - b2) * g * g;
      return p * (1 - lr * wd) - step_size * mi / (std::sqrt(vi) / bc2 + eps);
    };
    std::vector<double> w_ref(n), m_new(n), v_new(n), b_ref(nb);
    for (size_t i = 0; i < n; ++i) {
      m_new[i] = m.value(i);
      v_new[i] = v.value(i);
      w_ref[i] = adam(w0[i], m_new[i], v_new[i], double(grad_value(t, i)) * gs);
    }
    for (size_t i = 0; i < nb; ++i) b_ref[i] = adam(b0[i], mb[i], vb[i], double(grad_value(t, i)) * gs);

    const OptimizerStateDict sd = opt.state_dict();
    const std::string at = " at step " + std::to_string(t);
    expect_close(ps[0].second.to_double_vector(), w_ref, 1e-6, "w" + at);
    expect_close(ps[1].second.to_double_vector(), b_ref, 1e-6, "b" + at);
    m = read_moment(sd, "w.exp_avg", dynamic_map_signed());
    v = read_moment(sd, "w.exp_avg_sq", dynamic_map_unsigned());
    expect_requantised(m_new, m, "exp_avg" + at);
    expect_requantised(v_new, v, "exp_avg_sq" + at);
    expect_close(sd.tensors.at("b.exp_avg").to_double_vector(), mb, 1e-6, "b.exp_avg" + at);
    expect_close(sd.tensors.at("b.exp_avg_sq").to_double_vector(), vb, 1e-6, "b.exp_avg_sq" + at);
    mb = sd.tensors.at("b.exp_avg").to_double_vector();  // continue from the kernel's f32 state
    vb = sd.tensors.at("b.exp_avg_sq").to_double_vector();
  }
}

TEST(OptimLion8bit, MatchesQuantisedFloat64Reference) {
  auto ps = make_params();
  Lion8bitOptions o;
  o.lr = 0.003;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.weight_decay = 0.3;
  Lion8bit opt(ps, o);
  const double lr = f(o.lr), b1 = f(o.beta1), b2 = f(o.beta2), wd = f(o.weight_decay);
  const size_t n = size_t(ps[0].second.numel()), nb = size_t(ps[1].second.numel());
  Moment m{std::vector<int64_t>(n), std::vector<double>(quant_blocks(int64_t(n))), dynamic_map_signed()};
  std::vector<double> mb(nb);
  for (int t = 1; t <= 6; ++t) {
    const std::vector<double> w0 = ps[0].second.to_double_vector(), b0 = ps[1].second.to_double_vector();
    for (auto& [name, p] : ps) p.set_grad(grads_for(p, t));
    opt.step();
    auto lion = [&](double p, double& mi, double g) {
      const double c = b1 * mi + (1 - b1) * g;
      mi = b2 * mi + (1 - b2) * g;
      return p * (1 - lr * wd) - lr * sign(c);
    };
    std::vector<double> w_ref(n), m_new(n), b_ref(nb);
    for (size_t i = 0; i < n; ++i) {
      m_new[i] = m.value(i);
      w_ref[i] = lion(w0[i], m_new[i], double(grad_value(t, i)));
    }
    for (size_t i = 0; i < nb; ++i) b_ref[i] = lion(b0[i], mb[i], double(grad_value(t, i)));

    const OptimizerStateDict sd = opt.state_dict();
    const std::string at = " at step " + std::to_string(t);
    expect_close(ps[0].second.to_double_vector(), w_ref, 1e-6, "w" + at);
    expect_close(ps[1].second.to_double_vector(), b_ref, 1e-6, "b" + at);
    m = read_moment(sd, "w.exp_avg", dynamic_map_signed());
    expect_requantised(m_new, m, "exp_avg" + at);
    expect_close(sd.tensors.at("b.exp_avg").to_double_vector(), mb, 1e-6, "b.exp_avg" + at);
    mb = sd.tensors.at("b.exp_avg").to_double_vector();
  }
}

// Below min_8bit_size (4096 by default) the moments stay f32 and the update is AdamW's, bit for bit.
TEST(OptimAdamW8bit, SmallTensorsKeepF32State) {
  auto make = [] {
    std::vector<float> a(4095), b(4096);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(double(i)));
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(std::cos(double(i)));
    return std::vector<NamedTensor>{{"small", from_vector(a, {4095}).set_requires_grad(true)},
                                    {"large", from_vector(b, {64, 64}).set_requires_grad(true)}};
  };
  auto ps = make(), ref = make();
  AdamW8bit opt(ps, AdamW8bitOptions{});
  AdamWOptions o32;
  o32.weight_decay = AdamW8bitOptions{}.weight_decay;
  o32.state_dtype = DType::F32;
  AdamW ref_opt(ref, o32);
  for (int t = 1; t <= 3; ++t) {
    for (auto* set : {&ps, &ref})
      for (auto& [name, p] : *set) p.set_grad(grads_for(p, t));
    opt.step();
    ref_opt.step();
  }
  EXPECT_EQ(ps[0].second.to_double_vector(), ref[0].second.to_double_vector());
  EXPECT_NE(ps[1].second.to_double_vector(), ref[1].second.to_double_vector());  // quantised: close, not equal
  expect_close(ps[1].second.to_double_vector(), ref[1].second.to_double_vector(), 2e-3, "large");  // lr 1e-3, 3 steps
  const OptimizerStateDict sd = opt.state_dict();
  EXPECT_EQ(sd.tensors.at("small.exp_avg").dtype(), DType::F32);
  EXPECT_EQ(sd.tensors.at("small.exp_avg_sq").shape(), (Shape{4095}));
  EXPECT_EQ(sd.tensors.at("small.exp_avg_absmax").shape(), (Shape{0}));
  EXPECT_EQ(sd.tensors.at("large.exp_avg").dtype(), DType::U8);
  EXPECT_EQ(sd.tensors.at("large.exp_avg_sq").shape(), (Shape{64, 64}));
  EXPECT_EQ(sd.tensors.at("large.exp_avg_sq_absmax").shape(), (Shape{16}));

  // The threshold is an option.
  auto ps2 = make();
  AdamW8bitOptions o;
  o.min_8bit_size = 4095;
  AdamW8bit opt2(ps2, o);
  for (auto& [name, p] : ps2) p.set_grad(grads_for(p, 1));
  opt2.step();
  EXPECT_EQ(opt2.state_dict().tensors.at("small.exp_avg").dtype(), DType::U8);
}

// Exact bytes from the allocator's optimizer_state category: 8-bit moments cost 1 byte per
// element plus 4 bytes per 256 (absmax), each allocation rounded to 512 bytes; f32 moments 4.
TEST(OptimAdamW8bit, StateBytesAreExact) {
  std::vector<NamedTensor> ps;
  const std::vector<Shape> shapes{{64, 128}, {5000}, {100}, {4095}};
  for (size_t k = 0; k < shapes.size(); ++k)
    ps.push_back({"p" + std::to_string(k), zeros(shapes[k]).set_requires_grad(true)});
  auto& alloc = allocator_for(Device::cpu());
  auto state_now = [&] { return alloc.stats().category[size_t(Category::OptimizerState)].current; };
  for (const char* name : {"adamw8bit", "lion8bit", "adamw", "lion"}) {
    OptimizerConfig c;
    c.kind = *choice_named<OptimizerKind>(name);
    auto opt = make_optimizer(c, {{ps, {}}});
    for (auto& [n, p] : ps) p.set_grad(grads_for(p, 1));
    const int64_t before = state_now();
    opt->step();
    const std::string kind = name;
    const int moments = kind.rfind("adamw", 0) == 0 ? 2 : 1;
    int64_t want_alloc = 0, want_bytes = 0;
    for (const Shape& s : shapes) {
      const int64_t n = numel(s);
      const bool q = kind.find("8bit") != std::string::npos && n >= 4096;
      const int64_t codes = q ? n : 4 * n, absmax = q ? 4 * quant_blocks(n) : 0;
      want_bytes += moments * (codes + absmax);
      want_alloc += moments * (round_allocation(codes) + (q ? round_allocation(absmax) : 0));
    }
    EXPECT_EQ(opt->state_bytes(), want_bytes) << name;
    EXPECT_EQ(state_now() - before, want_alloc) << name;
    if (kind == "adamw8bit") {
      // 64*128 + 5000 quantised: 2 bytes + 8/256 per element; 100 + 4095 in f32: 8 bytes.
      EXPECT_EQ(want_bytes, 2 * (8192 + 5000) + 8 * (32 + 20) + 8 * (100 + 4095));
      EXPECT_EQ(want_alloc, 2 * (8192 + 5120 + 512 + 512) + 2 * (512 + 16384));
    }
    for (auto& [k, t] : opt->state_dict().tensors)
      if (k.find(".step") == std::string::npos && t.numel() > 0) EXPECT_EQ(t.category(), Category::OptimizerState) << k;
  }
}

// Resuming from a state dict written to safetensors and read back continues bit-identically:
// the 8-bit codes and absmax are saved as they are.
TEST(OptimAdamW8bit, StateDictRoundTripThroughSafetensors) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lt_q8_state_" + std::to_string(::getpid()) + ".safetensors")).string();
  for (const char* name : {"adamw8bit", "lion8bit"}) {
    auto run = [&](int resume_at) {
      auto ps = make_params();
      OptimizerConfig c;
      c.kind = *choice_named<OptimizerKind>(name);
      c.lr = 0.01;
      c.weight_decay = 0.1;
      auto opt = make_optimizer(c, decay_groups(ps));
      EXPECT_STREQ(opt->name(), name);
      for (int t = 1; t <= 5; ++t) {
        if (t == resume_at) {
          OptimizerStateDict sd = opt->state_dict();
          io::save_safetensors(path, std::vector<NamedTensor>(sd.tensors.begin(), sd.tensors.end()));
          auto fresh = make_params();
          for (size_t k = 0; k < ps.size(); ++k) copy_(fresh[k].second, ps[k].second);
          ps = fresh;
          opt = make_optimizer(c, decay_groups(ps));
          OptimizerStateDict loaded;
          for (auto& [k, t2] : io::load_safetensors(path)) loaded.tensors[k] = t2;
          EXPECT_EQ(loaded.tensors.at("w.exp_avg").dtype(), DType::U8);
          opt->load_state_dict(loaded);
          EXPECT_EQ(opt->step_count(), resume_at - 1);
        }
        for (auto& [n, p] : ps) p.set_grad(grads_for(p, t));
        opt->step();
      }
      auto out = ps[0].second.to_double_vector();
      for (double x : ps[1].second.to_double_vector()) out.push_back(x);
      return out;
    };
    EXPECT_EQ(run(4), run(-1)) << name;
  }
  std::filesystem::remove(path);
}

TEST(OptimAdamW8bit, OptionAndStateErrors) {
  auto ps = make_params();
  OptimizerConfig c;
  c.kind = *choice_named<OptimizerKind>("adamw8bit");
  c.state_dtype = DType::BF16;
  EXPECT_THROW(make_optimizer(c, {{ps, {}}}), Error);
  AdamW8bitOptions o;
  o.min_8bit_size = 0;
  EXPECT_THROW(AdamW8bit(ps, o), Error);

  // An AdamW checkpoint lacks the absmax tensors; one with another threshold has other shapes.
  c = OptimizerConfig{};
  auto adamw = make_optimizer(c, {{ps, {}}});
  for (auto& [n, p] : ps) p.set_grad(grads_for(p, 1));
  adamw->step();
  c.kind = *choice_named<OptimizerKind>("adamw8bit");
  EXPECT_THROW(make_optimizer(c, {{make_params(), {}}})->load_state_dict(adamw->state_dict()), Error);
  auto q8 = make_optimizer(c, {{ps, {}}});
  q8->step();
  c.min_8bit_size = 1 << 20;
  EXPECT_THROW(make_optimizer(c, {{make_params(), {}}})->load_state_dict(q8->state_dict()), Error);
}
