// gelu_linear, layer_norm_linear and attention_linear (src/ops/recompute_linear.cpp): finite-difference gradients
// in f64; in f32 the same output and gradients, bit for bit, as the ops they replace (linear of
// gelu, linear of layer_norm), for every subset of inputs that requires grad; and what they
// keep after the forward: the composed ops' saved tensors less the recomputed input.
#include <gtest/gtest.h>

#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "unit/gradcheck.h"

using namespace lt;
using lt::test::gradcheck;
using lt::test::rand64;

namespace {

Tensor rand32(const Shape& s, uint64_t seed, bool grad) {
  Generator g(seed);
  Tensor t = randn(s, g, 1.0f, DType::F32);
  if (grad) t.set_requires_grad(true);
  return t;
}

std::vector<float> bits(const Tensor& t) { return t.defined() ? t.to_float_vector() : std::vector<float>{}; }

// f(inputs) and the gradients of every input, from backward(r) with a fixed random r.
std::vector<std::vector<float>> run(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                    const std::vector<Tensor>& inputs) {
  for (const Tensor& x : inputs)
    if (x.defined()) x.impl()->grad.reset();
  Tensor y = f(inputs);
  Generator g(99);
  Tensor r = randn(y.shape(), g, 1.0f, y.dtype());
  std::vector<std::vector<float>> out{bits(y)};
  y.backward(r);
  for (const Tensor& x : inputs) out.push_back(x.defined() && x.grad().defined() ? bits(x.grad()) : std::vector<float>{});
  return out;
}

// Activation bytes still allocated after f's forward (the output dropped), relative to before.
int64_t kept_after_forward(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                           Tensor& graph) {
  Allocator& a = allocator_for(Device::cpu());
  MemoryCategoryScope scope(Category::Activation);
  const int64_t before = a.stats().category[int(Category::Activation)].current;
  graph = f(in);
  return a.stats().category[int(Category::Activation)].current - before - round_allocation(graph.nbytes());
}

}  // namespace

TEST(RecomputeLinear, GeluLinearGradcheck) {
  for (GeluApprox ap : {GeluApprox::Erf, GeluApprox::Tanh})
    for (bool in_out : {false, true}) {
      Tensor pre = rand64({2, 3, 6}, 1), w = rand64(in_out ? Shape{6, 4} : Shape{4, 6}, 2), b = rand64({4}, 3);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return gelu_linear(x[0], x[1], x[2], ap, in_out); },
                            {pre, w, b}));
    }
}

TEST(RecomputeLinear, LayerNormLinearGradcheck) {
  for (bool in_out : {false, true}) {
    Tensor x = rand64({2, 3, 8}, 4), lw = rand64({8}, 5), lb = rand64({8}, 6);
    Tensor w = rand64(in_out ? Shape{8, 5} : Shape{5, 8}, 7), b = rand64({5}, 8);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& v) { return layer_norm_linear(v[0], v[1], v[2], 1e-5, v[3], v[4], in_out); },
        {x, lw, lb, w, b}));
  }
}

// Every subset of {pre, w, b} requiring grad (the backward computes only what is needed).
TEST(RecomputeLinear, GeluLinearEqualsLinearOfGeluBitwise) {
  for (GeluApprox ap : {GeluApprox::Erf, GeluApprox::Tanh})
    for (bool in_out : {false, true})
      for (int mask = 1; mask < 8; ++mask) {
        Tensor pre = rand32({3, 5, 16}, 11, mask & 1), w = rand32(in_out ? Shape{16, 8} : Shape{8, 16}, 12, mask & 2);
        Tensor b = rand32({8}, 13, mask & 4);
        auto fused = run([&](const std::vector<Tensor>& x) { return gelu_linear(x[0], x[1], x[2], ap, in_out); },
                         {pre, w, b});
        auto ref = run([&](const std::vector<Tensor>& x) { return linear(gelu(x[0], ap), x[1], x[2], in_out); },
                       {pre, w, b});
        EXPECT_EQ(fused, ref) << "approx " << int(ap) << ", in_out " << in_out << ", mask " << mask;
      }
}

TEST(RecomputeLinear, LinearGeluPartsThenGeluLinearEqualsTheMlpBitwise) {
  for (GeluApprox ap : {GeluApprox::Erf, GeluApprox::Tanh}) {
    Tensor x = rand32({2, 4, 8}, 21, true), w1 = rand32({16, 8}, 22, true), b1 = rand32({16}, 23, true);
    Tensor w2 = rand32({8, 16}, 24, true), b2 = rand32({8}, 25, true);
    auto fused = run(
        [&](const std::vector<Tensor>& v) {
          LinearGelu h = linear_gelu_parts(v[0], v[1], v[2], ap);
          EXPECT_FALSE(h.act.requires_grad());
          return gelu_linear(h.pre, v[3], v[4], ap, false, h.act);
        },
        {x, w1, b1, w2, b2});
    auto ref = run([&](const std::vector<Tensor>& v) { return linear(gelu(linear(v[0], v[1], v[2]), ap), v[3], v[4]); },
                   {x, w1, b1, w2, b2});
    EXPECT_EQ(fused, ref) << int(ap);
  }
}

// GPT-2's MLP under lean saves: the norm folded into fc1, the GELU in fc1's epilogue, fc2
// recomputing the GELU. Widths of 16 (epilogue) and 12 (act left to gelu_linear).
TEST(RecomputeLinear, LayerNormLinearGeluThenGeluLinearEqualsTheMlpBitwise) {
  for (int64_t hidden : {16, 12})
    for (bool in_out : {false, true}) {
      Tensor x = rand32({2, 5, 8}, 41, true), lw = rand32({8}, 42, true), lb = rand32({8}, 43, true);
      Tensor w1 = rand32(in_out ? Shape{8, hidden} : Shape{hidden, 8}, 44, true), b1 = rand32({hidden}, 45, true);
      Tensor w2 = rand32(in_out ? Shape{hidden, 8} : Shape{8, hidden}, 46, true), b2 = rand32({8}, 47, true);
      auto fused = run(
          [&](const std::vector<Tensor>& v) {
            LinearGelu h = layer_norm_linear_gelu(v[0], v[1], v[2], 1e-5, v[3], v[4], in_out);
            EXPECT_EQ(h.act.defined(), hidden % 8 == 0);
            if (h.act.defined()) EXPECT_FALSE(h.act.requires_grad());
            return gelu_linear(h.pre, v[5], v[6], GeluApprox::Tanh, in_out, h.act);
          },
          {x, lw, lb, w1, b1, w2, b2});
      auto ref = run(
          [&](const std::vector<Tensor>& v) {
            Tensor h = linear(layer_norm(v[0], v[1], v[2], 1e-5), v[3], v[4], in_out);
            return linear(gelu(h, GeluApprox::Tanh), v[5], v[6], in_out);
          },
          {x, lw, lb, w1, b1, w2, b2});
      EXPECT_EQ(fused, ref) << "hidden " << hidden << ", in_out " << in_out;
    }
}

TEST(RecomputeLinear, LayerNormLinearEqualsLinearOfLayerNormBitwise) {
  for (bool in_out : {false, true})
    for (bool bias : {false, true})
      for (int mask = 1; mask < 32; ++mask) {
        Tensor x = rand32({3, 7, 32}, 31, mask & 1), lw = rand32({32}, 32, mask & 2);
        Tensor lb = bias ? rand32({32}, 33, mask & 4) : Tensor();
        Tensor w = rand32(in_out ? Shape{32, 12} : Shape{12, 32}, 34, mask & 8), b = rand32({12}, 35, mask & 16);
        if (mask == 4 && !bias) continue;  // only the absent bias would need a gradient
        auto fused = run([&](const std::vector<Tensor>& v) { return layer_norm_linear(v[0], v[1], v[2], 1e-5, v[3], v[4], in_out); },
                         {x, lw, lb, w, b});
        auto ref = run([&](const std::vector<Tensor>& v) { return linear(layer_norm(v[0], v[1], v[2], 1e-5), v[3], v[4], in_out); },
                       {x, lw, lb, w, b});
        EXPECT_EQ(fused, ref) << "in_out " << in_out << ", bias " << bias << ", mask " << mask;
      }
}

// After the forward, gelu_linear keeps pre (not gelu(pre)) and layer_norm_linear keeps x, mean
// and rstd (not the normalised rows): the composed ops' bytes less exactly that one input.
TEST(RecomputeLinear, KeepsTheComposedOpsSavedTensorsLessTheRecomputedInput) {
  const int64_t rows = 128, hidden = 64, out = 32;
  const int64_t buffer = round_allocation(rows * hidden * 4);
  {
    Tensor pre = rand32({rows, hidden}, 41, true), w = rand32({out, hidden}, 42, true), b = rand32({out}, 43, true);
    Tensor g1, g2;
    const int64_t fused = kept_after_forward(
        [](const std::vector<Tensor>& x) { return gelu_linear(x[0], x[1], x[2], GeluApprox::Erf); }, {pre, w, b}, g1);
    const int64_t ref = kept_after_forward(
        [](const std::vector<Tensor>& x) { return linear(gelu(x[0], GeluApprox::Erf), x[1], x[2]); }, {pre, w, b}, g2);
    EXPECT_EQ(ref - fused, buffer);
    EXPECT_EQ(fused, 0);  // pre is the caller's tensor: nothing new is kept
  }
  {
    Tensor x = rand32({rows, hidden}, 44, true), lw = rand32({hidden}, 45, true), lb = rand32({hidden}, 46, true);
    Tensor w = rand32({out, hidden}, 47, true), b = rand32({out}, 48, true);
    Tensor g1, g2;
    const int64_t fused = kept_after_forward(
        [](const std::vector<Tensor>& v) { return layer_norm_linear(v[0], v[1], v[2], 1e-5, v[3], v[4]); },
        {x, lw, lb, w, b}, g1);
    const int64_t ref = kept_after_forward(
        [](const std::vector<Tensor>& v) { return linear(layer_norm(v[0], v[1], v[2], 1e-5), v[3], v[4]); },
        {x, lw, lb, w, b}, g2);
    EXPECT_EQ(ref - fused, buffer);
    EXPECT_EQ(fused, 2 * round_allocation(rows * 4));  // mean and rstd
  }
}

// keep_act (the MLP of --no-lean-saves): the same output and gradients bit for bit, for every
// subset of inputs requiring grad, with act given (linear_gelu_parts) or computed; it keeps the
// GELU's output (one buffer) for the weight gradient, which it then reads instead of recomputing.
TEST(RecomputeLinear, GeluLinearKeepingActEqualsRecomputingBitwise) {
  for (GeluApprox ap : {GeluApprox::Erf, GeluApprox::Tanh})
    for (bool given : {false, true})
      for (int mask = 1; mask < 8; ++mask) {
        Tensor pre = rand32({3, 5, 16}, 51, mask & 1), w = rand32({16, 8}, 52, mask & 2), b = rand32({8}, 53, mask & 4);
        auto f = [&](bool keep) {
          return [&, keep](const std::vector<Tensor>& x) {
            Tensor act = given ? gelu(x[0].detach(), ap) : Tensor();
            return gelu_linear(x[0], x[1], x[2], ap, true, act, keep);
          };
        };
        EXPECT_EQ(run(f(true), {pre, w, b}), run(f(false), {pre, w, b}))
            << "approx " << int(ap) << ", act given " << given << ", mask " << mask;
      }
  const int64_t rows = 128, hidden = 64, out = 32;
  Tensor pre = rand32({rows, hidden}, 54, true), w = rand32({out, hidden}, 55, true), b = rand32({out}, 56, true);
  Tensor g1, g2;
  const int64_t kept = kept_after_forward(
      [](const std::vector<Tensor>& x) { return gelu_linear(x[0], x[1], x[2], GeluApprox::Tanh, false, Tensor(), true); },
      {pre, w, b}, g1);
  EXPECT_EQ(kept, round_allocation(rows * hidden * 4));  // the GELU's output
  // Without a weight gradient there is nothing to keep it for.
  w.set_requires_grad(false);
  EXPECT_EQ(kept_after_forward(
                [](const std::vector<Tensor>& x) {
                  return gelu_linear(x[0], x[1], x[2], GeluApprox::Tanh, false, Tensor(), true);
                },
                {pre, w, b}, g2),
            0);
}

TEST(RecomputeLinear, AttentionLinearGradcheck) {
  for (bool causal : {false, true})
    for (bool in_out : {false, true}) {
      Tensor qkv = rand64({2, 5, 3 * 2 * 3}, 61), w = rand64(in_out ? Shape{6, 4} : Shape{4, 6}, 62), b = rand64({4}, 63);
      EXPECT_TRUE(gradcheck(
          [&](const std::vector<Tensor>& x) { return attention_linear(x[0], 2, 2, causal, Tensor(), x[1], x[2], in_out); },
          {qkv, w, b}));
    }
}

// The attention output, recomputed in the backward by the forward's kernel, gives the bits of the
// composed ops (attention then linear), grouped or not, masked or not, for every subset of
// inputs that requires grad; and the forward keeps qkv and the log-sum-exp only.
TEST(RecomputeLinear, AttentionLinearEqualsLinearOfAttentionBitwise) {
  Tensor mask = from_vector(std::vector<float>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, {3, 5}).to(DType::U8);
  for (int64_t kv : {int64_t(4), int64_t(2)})
    for (bool masked : {false, true})
      for (int sel = 1; sel < 8; ++sel) {
        const bool in_out = sel % 2 == 0;
        Tensor qkv = rand32({3, 5, (4 + 2 * kv) * 8}, 71, sel & 1), w = rand32(in_out ? Shape{32, 12} : Shape{12, 32}, 72, sel & 2);
        Tensor b = rand32({12}, 73, sel & 4);
        const Tensor m = masked ? mask : Tensor();
        auto fused = run([&](const std::vector<Tensor>& v) { return attention_linear(v[0], 4, kv, true, m, v[1], v[2], in_out); },
                         {qkv, w, b});
        auto ref = run([&](const std::vector<Tensor>& v) {
          return linear(self_attention_packed(v[0], 4, kv, true, m), v[1], v[2], in_out);
        }, {qkv, w, b});
        EXPECT_EQ(fused, ref) << "kv " << kv << ", masked " << masked << ", sel " << sel;
      }
  Tensor qkv = rand32({4, 32, 3 * 64}, 74, true), w = rand32({16, 64}, 75, true);
  Tensor g1, g2;
  const int64_t fused = kept_after_forward(
      [](const std::vector<Tensor>& v) { return attention_linear(v[0], 2, 2, false, Tensor(), v[1], Tensor()); }, {qkv, w}, g1);
  const int64_t ref = kept_after_forward(
      [](const std::vector<Tensor>& v) { return linear(self_attention_packed(v[0], 2, false), v[1], Tensor()); }, {qkv, w}, g2);
  EXPECT_EQ(ref - fused, round_allocation(4 * 32 * 64 * 4));  // the attention output
  EXPECT_EQ(fused, round_allocation(4 * 2 * 32 * 4));         // the log-sum-exp
}

TEST(RecomputeLinear, BadInputsAreOneLineErrors) {
  Tensor pre = rand32({4, 8}, 51, true), w = rand32({3, 8}, 52, true);
  EXPECT_THROW(gelu_linear(pre, w, Tensor(), GeluApprox::Erf, false, rand32({4, 7}, 53, false)), Error);
  EXPECT_THROW(layer_norm_linear(pre, rand32({7}, 54, true), Tensor(), 1e-5, w, Tensor()), Error);
  EXPECT_THROW(layer_norm_linear(pre, rand32({8}, 55, true), Tensor(), 1e-5, rand32({3, 5}, 56, true), Tensor()), Error);
  Tensor qkv = rand32({2, 4, 3 * 8}, 57, true);
  EXPECT_THROW(attention_linear(qkv, 3, 3, false, Tensor(), rand32({8, 8}, 58, true), Tensor()), Error);  // 8 % 3
  EXPECT_THROW(attention_linear(qkv, 2, 2, false, Tensor(), rand32({8, 5}, 59, true), Tensor()), Error);  // in 5 != C 8
  EXPECT_THROW(attention_linear(rand32({2, 4, 3 * 8}, 60, true), 2, 2, false, rand32({2, 3}, 60, false), rand32({8, 8}, 61, true),
                                Tensor()),
               Error);  // a mask of the wrong length
}
