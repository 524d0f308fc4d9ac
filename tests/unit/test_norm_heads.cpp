// rms_norm_heads, the per-head RMSNorm of a packed q | k | v projection: on the CPU equal, bit for
// bit, to what it replaces (the heads sliced out, rms_norm on [..., n, D] copies, concatenated back)
// in the forward and every gradient, f32 and bf16, with and without passthrough columns, unit offset,
// a strided x, frozen weights and autocast; a float64 gradcheck; one-line refusals; a Qwen3 step
// against the same step through the norm modules; and CUDA against the CPU (and against the
// composition of CUDA's own rms_norm).
#include <gtest/gtest.h>

#include <optional>

#include "leantrain/autocast.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "models/llama.h"
#include "unit/checkpoint_helpers.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"
#include "unit/rel_error.h"

using namespace lt;
using namespace lt::test;

namespace {

using V = std::vector<Tensor>;

// The composition the op replaces (DecoderSelfAttention::norm_heads before it).
Tensor composed(const Tensor& x, const Tensor& wa, int64_t ha, const Tensor& wb, int64_t hb, double eps, bool uo) {
  const int64_t D = wa.size(0), W = x.size(-1), last = x.dim() - 1;
  Shape lead = x.shape();
  lead.pop_back();
  auto normed = [&](const Tensor& w, int64_t start, int64_t n) {
    Shape hs = lead, flat = lead;
    hs.push_back(n);
    hs.push_back(D);
    flat.push_back(n * D);
    return reshape(rms_norm(reshape(contiguous(slice(x, last, start, start + n * D)), hs), w, eps, uo), flat);
  };
  V parts{normed(wa, 0, ha), normed(wb, ha * D, hb)};
  if ((ha + hb) * D < W) parts.push_back(slice(x, last, (ha + hb) * D, W));
  return concat(parts, last);
}

struct Case {
  const char* name;
  int64_t ha, hb, D, rest;
  int64_t pad_before = 0, pad_after = 0;  // x is columns [pad_before, pad_before + W) of a wider base
};

// The base x (a leaf) and the two weights, fresh from `seed`.
V make_inputs(const Case& c, DType dt, Device dev, uint64_t seed, bool grad_wa = true) {
  Generator g(seed);
  const int64_t W = (c.ha + c.hb) * c.D + c.rest;
  V p{randn({2, 5, c.pad_before + W + c.pad_after}, g, 1.0f, dt), randn({c.D}, g, 1.0f, dt), randn({c.D}, g, 1.0f, dt)};
  for (Tensor& t : p) t = to_device(t, dev).set_requires_grad(true);
  if (!grad_wa) p[1].set_requires_grad(false);
  return p;
}

Tensor x_of(const Case& c, const Tensor& base) {
  const int64_t W = (c.ha + c.hb) * c.D + c.rest;
  return c.pad_before + c.pad_after ? slice(base, 2, c.pad_before, c.pad_before + W) : base;
}

Tensor run(const Case& c, const V& p, bool fused, bool uo) {
  const Tensor x = x_of(c, p[0]);
  return fused ? rms_norm_heads(x, p[1], c.ha, p[2], c.hb, 1e-6, uo) : composed(x, p[1], c.ha, p[2], c.hb, 1e-6, uo);
}

const Case kCases[] = {
    {"q3_k1_rest", 3, 1, 8, 8},
    {"q2_k2_no_rest", 2, 2, 8, 0},
    {"q4_k2_strided", 4, 2, 16, 32, 3, 5},
    {"q1_k3_odd", 1, 3, 6, 6, 1, 0},
};

void expect_bits(const Tensor& a, const Tensor& b, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.defined(), b.defined());
  if (!a.defined()) return;
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.to_double_vector(), b.to_double_vector());
}

TEST(NormHeads, EqualsTheCompositionBitForBitOnCpu) {
  for (const Case& c : kCases)
    for (DType dt : {DType::F32, DType::BF16})
      for (bool uo : {false, true})
        for (bool grad_wa : {true, false}) {
          SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt) + (uo ? " unit_offset" : "") +
                       (grad_wa ? "" : " wa frozen"));
          V a = make_inputs(c, dt, Device::cpu(), 7, grad_wa), b = make_inputs(c, dt, Device::cpu(), 7, grad_wa);
          Tensor ya = run(c, a, true, uo), yb = run(c, b, false, uo);
          expect_bits(ya, yb, "y");
          Generator g(11);
          const Tensor up = randn(ya.shape(), g, 1.0f, dt);
          ya.backward(up);
          yb.backward(up);
          expect_bits(a[0].grad(), b[0].grad(), "dx");
          expect_bits(a[1].grad(), b[1].grad(), "dwa");
          expect_bits(a[2].grad(), b[2].grad(), "dwb");
          EXPECT_EQ(a[1].grad().defined(), grad_wa);
        }
}

// Under autocast the f32 weights reach the op as recorded bf16 casts; their gradients come back in
// f32, summed unrounded, as rms_norm gives them.
TEST(NormHeads, AutocastWeightsGetTheCompositionsF32Gradients) {
  const Case c{"autocast", 3, 1, 8, 8};
  V a = make_inputs(c, DType::F32, Device::cpu(), 3), b = make_inputs(c, DType::F32, Device::cpu(), 3);
  AutocastGuard ac(DType::BF16);
  const Tensor xa = cast(a[0], DType::BF16), xb = cast(b[0], DType::BF16);
  Tensor ya = rms_norm_heads(xa, autocast_like(a[1], xa), 3, autocast_like(a[2], xa), 1);
  Tensor yb = composed(xb, autocast_like(b[1], xb), 3, autocast_like(b[2], xb), 1, 1e-6, false);
  expect_bits(ya, yb, "y");
  Generator g(5);
  const Tensor up = randn(ya.shape(), g, 1.0f, DType::BF16);
  ya.backward(up);
  yb.backward(up);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a[size_t(i)].grad().dtype(), DType::F32);
    expect_bits(a[size_t(i)].grad(), b[size_t(i)].grad(), i == 0 ? "dx" : i == 1 ? "dwa" : "dwb");
  }
}

TEST(NormHeads, Gradcheck) {
  for (bool uo : {false, true}) {
    SCOPED_TRACE(uo ? "unit_offset" : "plain");
    // rest > 0, x read in place from a column slice of a wider tensor
    EXPECT_TRUE(gradcheck([uo](const V& x) { return rms_norm_heads(slice(x[0], 2, 1, 17), x[1], 2, x[2], 1, 1e-6, uo); },
                          {rand64({2, 3, 19}, 1), rand64({4}, 2), rand64({4}, 3)}));
    // rest == 0, ha < hb
    EXPECT_TRUE(gradcheck([uo](const V& x) { return rms_norm_heads(x[0], x[1], 1, x[2], 2, 1e-6, uo); },
                          {rand64({3, 9}, 4), rand64({3}, 5), rand64({3}, 6)}));
  }
}

// One row (whatever its leading dims' strides) and no rows at all.
TEST(NormHeads, OneRowAndNoRows) {
  Generator g(9);
  for (const Shape& s : {Shape{1, 1, 24}, Shape{24}, Shape{0, 24}}) {
    SCOPED_TRACE(shape_str(s));
    V a{randn(s, g), randn({8}, g), randn({8}, g)};
    V b{a[0].clone(), a[1].clone(), a[2].clone()};
    for (size_t i = 0; i < 3; ++i) a[i].set_requires_grad(true), b[i].set_requires_grad(true);
    Tensor ya = rms_norm_heads(a[0], a[1], 1, a[2], 1), yb = composed(b[0], b[1], 1, b[2], 1, 1e-6, false);
    expect_bits(ya, yb, "y");
    const Tensor up = randn(ya.shape(), g);
    ya.backward(up);
    yb.backward(up);
    for (size_t i = 0; i < 3; ++i) expect_bits(a[i].grad(), b[i].grad(), "grad");
  }
}

TEST(NormHeads, NoGradRecordsNothing) {
  V p = make_inputs(kCases[0], DType::F32, Device::cpu(), 1);
  NoGradGuard ng;
  EXPECT_FALSE(run(kCases[0], p, true, false).requires_grad());
}

TEST(NormHeads, BadInputsAreRefusedInOneLine) {
  Generator g(1);
  const Tensor x = randn({2, 3, 40}, g), w = randn({8}, g);
  EXPECT_THROW(rms_norm_heads(x, randn({8}, g, 1.0f, DType::BF16), 3, w, 1), Error);
  EXPECT_NE(error_of([&] { rms_norm_heads(x, randn({8}, g, 1.0f, DType::BF16), 3, w, 1); }).find("dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] { rms_norm_heads(x, w, 3, randn({4}, g), 1); }).find("weights [8] and [4]"), std::string::npos);
  EXPECT_THROW(rms_norm_heads(x, randn({2, 4}, g), 3, w, 1), Error);
  EXPECT_NE(error_of([&] { rms_norm_heads(x, w, 4, w, 2); }).find("for 4 + 2 heads of 8"), std::string::npos);
  EXPECT_NE(error_of([&] { rms_norm_heads(x, w, -1, w, 1); }).find("-1 and 1 heads"), std::string::npos);
  EXPECT_THROW(rms_norm_heads(x, randn({0}, g), 1, randn({0}, g), 1), Error);
  EXPECT_THROW(rms_norm_heads(x, Tensor(), 3, w, 1), Error);
  EXPECT_THROW(rms_norm_heads(x.to(Device::meta()), w, 3, w, 1), Error);  // devices differ
  for (const std::string& e : {error_of([&] { rms_norm_heads(x, w, 9, w, 1); }),
                               error_of([&] { rms_norm_heads(x, w, 1, randn({4}, g), 1); })}) {
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// ---- in the model ----

// A Qwen3 step whose attention layers take the op, against the same step with a pass-through
// forward wrapper on every q_norm / k_norm (the composition through the modules): the same loss and
// the same gradient bits, in f32 and under bf16 autocast.
TEST(NormHeads, Qwen3AttentionEqualsTheModuleComposition) {
  models::LlamaConfig c = models::LlamaConfig::defaults("qwen3");
  c.vocab_size = 40, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8, c.max_position_embeddings = 32;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "autocast bf16" : "f32");
    auto step = [&](bool wrap) {
      models::Llama m(c, nn::InitOptions{.seed = 4});
      {  // norm weights away from their init of ones, so that a swapped or dropped weight shows
        NoGradGuard ng;
        Generator gen(8);
        for (auto& [n, p] : m.named_parameters())
          if (n.find("_norm.") != std::string::npos) copy_(p, randn(p.shape(), gen, 0.3f));
      }
      if (wrap)
        for (auto& [path, mod] : m.named_modules())
          if (path.ends_with(".q_norm") || path.ends_with(".k_norm"))
            mod->set_forward_wrapper([](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) { return f(x); });
      std::optional<AutocastGuard> ac;
      if (bf16) ac.emplace(DType::BF16);
      Tensor loss = m.loss(ckpt_test::ids(2, 6, 40, 1), ckpt_test::ids(2, 6, 40, 2));
      const double l = loss.to_double_vector()[0];
      loss.backward();
      return std::make_pair(l, ckpt_test::grad_bits(m));
    };
    const auto fused = step(false), composed_ = step(true);
    EXPECT_EQ(fused.first, composed_.first);
    EXPECT_EQ(fused.second, composed_.second);
  }
}

// ---- CUDA ----

struct Result {
  V out;  // y, dx, dwa, dwb on the CPU
};

Result run_grads(const Case& c, DType dt, Device dev, bool fused) {
  V p = make_inputs(c, dt, dev, 21);
  Tensor y = run(c, p, fused, c.ha % 2 == 1);  // unit offset in some cases
  Generator g(23);
  y.backward(to_device(randn(y.shape(), g, 1.0f, dt), dev));
  return {{y.to(Device::cpu()), p[0].grad().to(Device::cpu()), p[1].grad().to(Device::cpu()), p[2].grad().to(Device::cpu())}};
}

TEST(NormHeads, CudaMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Knob {  // the per-head kernels are opt-in on CUDA (LEANTRAIN_NORM_HEADS_CUDA) until a GPU has run them
    Knob() { ::setenv("LEANTRAIN_NORM_HEADS_CUDA", "1", 1); }
    ~Knob() { ::unsetenv("LEANTRAIN_NORM_HEADS_CUDA"); }
  } knob;
  const Case cases[] = {
      {"qwen3_D128", 4, 2, 128, 2 * 128},
      {"D256", 2, 1, 256, 256},
      {"D72_no_rest", 3, 2, 72, 0},
      {"D72_misaligned_slice", 3, 2, 72, 72, 2, 6},  // x's rows start 2 columns in: one element at a time
      {"D128_padded", 4, 2, 128, 2 * 128, 0, 8},
  };
  const char* names[] = {"y", "dx", "dwa", "dwb"};
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt));
      const double tol = dt == DType::F32 ? 1e-5 : 2e-2;
      const Result cpu = run_grads(c, dt, Device::cpu(), true), gpu = run_grads(c, dt, Device::cuda(), true);
      const Result gpu_composed = run_grads(c, dt, Device::cuda(), false);
      for (size_t i = 0; i < 4; ++i) {
        SCOPED_TRACE(names[i]);
        EXPECT_LT(rel_error(gpu.out[i].to_double_vector(), cpu.out[i].to_double_vector()), tol);
        EXPECT_LT(rel_error(gpu.out[i].to_double_vector(), gpu_composed.out[i].to_double_vector()), tol);
      }
      // The forward and dx are norm.cu's row kernels' expressions, in packs where those take packs.
      if (c.pad_before % 8 == 0) {
        EXPECT_EQ(gpu.out[0].to_double_vector(), gpu_composed.out[0].to_double_vector());
        EXPECT_EQ(gpu.out[1].to_double_vector(), gpu_composed.out[1].to_double_vector());
      }
      // Deterministic: a second run gives the same bits.
      const Result again = run_grads(c, dt, Device::cuda(), true);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(again.out[i].to_double_vector(), gpu.out[i].to_double_vector()) << names[i];
    }
}

}  // namespace
