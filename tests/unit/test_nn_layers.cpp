// Layers against naive host loops: the weight layouts and the q|k|v / head split must be the
// reference models' own, or a reference checkpoint would load and compute something else.
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/nn.h"

using namespace lt;

namespace {

using Vec = std::vector<double>;

// y[t][o] = sum_i x[t][i] * W(o, i) + b[o]; W(o, i) reads [out, in] or [in, out].
Vec naive_linear(const Vec& x, int64_t rows, int64_t in, const Vec& w, const Vec& b, int64_t out, bool in_out) {
  Vec y(size_t(rows * out));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[size_t(t * in + i)] * w[size_t(in_out ? i * out + o : o * in + i)];
      y[size_t(t * out + o)] = s;
    }
  return y;
}

// Multi-head attention over one sequence: qkv [T, 3C] laid out q | k | v, heads of D = C / H.
Vec naive_attention(const Vec& qkv, int64_t T, int64_t C, int64_t H, bool causal) {
  const int64_t D = C / H;
  Vec out(size_t(T * C), 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      Vec s(size_t(T), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qkv[size_t(i * 3 * C + h * D + d)] * qkv[size_t(j * 3 * C + C + h * D + d)];
        s[size_t(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(j)]);
      }
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - mx));
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d)
          out[size_t(i * C + h * D + d)] += s[size_t(j)] / z * qkv[size_t(j * 3 * C + 2 * C + h * D + d)];
    }
  return out;
}

Vec values(const Tensor& t) { return t.to_double_vector(); }

void expect_near(const Vec& a, const Vec& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

}  // namespace

TEST(NnLayers, PatchEmbeddingIsAStridedConv) {
  const int64_t B = 2, C = 2, S = 4, p = 2, D = 3;
  nn::ParamFactory pf({.dtype = DType::F64, .seed = 1});
  nn::PatchEmbedding pe(pf, C, D, p, nn::Init::normal(1.0));
  pf.materialize();
  Generator g(2);
  Tensor img = randn({B, C, S, S}, g, 1.0f, DType::F64);
  Vec x = values(img), w = values(pe.parameter("weight")), b = values(pe.parameter("bias"));
  Vec y = values(pe(img));
  ASSERT_EQ(y.size(), size_t(B * 4 * D));
  for (int64_t n = 0; n < B; ++n)
    for (int64_t py = 0; py < S / p; ++py)
      for (int64_t px = 0; px < S / p; ++px)
        for (int64_t o = 0; o < D; ++o) {
          double s = b[size_t(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < p; ++i)
              for (int64_t j = 0; j < p; ++j)
                s += w[size_t(((o * C + c) * p + i) * p + j)] * x[size_t(((n * C + c) * S + py * p + i) * S + px * p + j)];
          EXPECT_NEAR(y[size_t(((n * 2 + py) * 2 + px) * D + o)], s, 1e-12);
        }
}

TEST(NnLayers, TorchMultiheadAttentionMatchesNaive) {
  const int64_t T = 5, C = 6, H = 2;
  nn::ParamFactory pf({.dtype = DType::F64, .seed = 3});
  nn::MultiheadSelfAttention attn(pf, C, H);
  pf.materialize();
  Generator g(4);
  Tensor x = randn({1, T, C}, g, 1.0f, DType::F64);
  Vec qkv = naive_linear(values(x), T, C, values(attn.parameter("in_proj_weight")),
                         values(attn.parameter("in_proj_bias")), 3 * C, false);
  // Non-zero in_proj bias so the bias split is exercised too.
  Vec want = naive_linear(naive_attention(qkv, T, C, H, false), T, C, values(attn.parameter("out_proj.weight")),
                          values(attn.parameter("out_proj.bias")), C, false);
  expect_near(values(attn(x)), want, 1e-7);  // the backend takes the softmax scale as float
}

TEST(NnLayers, Gpt2AttentionMatchesNaiveCausal) {
  const int64_t T = 4, C = 8, H = 4;
  nn::ParamFactory pf({.dtype = DType::F64, .seed = 5});
  nn::CausalSelfAttention attn(pf, C, H, 0.0, nn::Init::normal(0.3));
  pf.materialize();
  {
    NoGradGuard ng;  // biases start at zero; give them values so their layout is checked
    Generator g(6);
    copy_(attn.parameter("c_attn.bias"), randn({3 * C}, g, 1.0f, DType::F64));
    copy_(attn.parameter("c_proj.bias"), randn({C}, g, 1.0f, DType::F64));
  }
  Generator g(7);
  Tensor x = randn({1, T, C}, g, 1.0f, DType::F64);
  Vec qkv = naive_linear(values(x), T, C, values(attn.parameter("c_attn.weight")), values(attn.parameter("c_attn.bias")),
                         3 * C, true);
  Vec want = naive_linear(naive_attention(qkv, T, C, H, true), T, C, values(attn.parameter("c_proj.weight")),
                          values(attn.parameter("c_proj.bias")), C, true);
  expect_near(values(attn(x)), want, 1e-7);  // the backend takes the softmax scale as float
}

TEST(NnLayers, MlpIsFc1GeluFc2WithReferenceNames) {
  nn::ParamFactory pf({.dtype = DType::F64, .seed = 8});
  nn::Mlp mlp(pf, {.dim = 3, .hidden = 5, .approx = GeluApprox::Erf, .fc1_name = "0", .fc2_name = "3", .dropout_name = "4"});
  pf.materialize();
  Generator g(9);
  Tensor x = randn({2, 3}, g, 1.0f, DType::F64);
  Vec h = naive_linear(values(x), 2, 3, values(mlp.parameter("0.weight")), values(mlp.parameter("0.bias")), 5, false);
  for (double& v : h) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  Vec want = naive_linear(h, 2, 5, values(mlp.parameter("3.weight")), values(mlp.parameter("3.bias")), 3, false);
  expect_near(values(mlp(x)), want, 1e-10);
  EXPECT_NE(mlp.find_module("4"), nullptr);
}
