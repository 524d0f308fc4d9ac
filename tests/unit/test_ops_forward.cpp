// Forward semantics of the norm/attention/embedding/loss/dropout ops against naive f64
// formulas written out here, plus their errors and edge cases (masked rows, ignored rows).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

using Vec = std::vector<double>;

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::F64) {
  Generator g(seed);
  return randn(s, g, 1.0f, dt);
}

void expect_close(const Vec& a, const Vec& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(OpsForward, LayerNormAndRmsNorm) {
  Tensor x = rnd({3, 5}, 1), w = rnd({5}, 2), b = rnd({5}, 3);
  Vec xv = x.to_double_vector(), wv = w.to_double_vector(), bv = b.to_double_vector(), ln(15), rms(15);
  for (int i = 0; i < 3; ++i) {
    double m = 0, v = 0, ss = 0;
    for (int j = 0; j < 5; ++j) m += xv[i * 5 + j] / 5;
    for (int j = 0; j < 5; ++j) v += (xv[i * 5 + j] - m) * (xv[i * 5 + j] - m) / 5, ss += xv[i * 5 + j] * xv[i * 5 + j] / 5;
    for (int j = 0; j < 5; ++j) {
      ln[i * 5 + j] = (xv[i * 5 + j] - m) / std::sqrt(v + 1e-5) * wv[j] + bv[j];
      rms[i * 5 + j] = xv[i * 5 + j] / std::sqrt(ss + 1e-6) * wv[j];
    }
  }
  expect_close(layer_norm(x, w, b).to_double_vector(), ln, 1e-12);
  expect_close(rms_norm(x, w).to_double_vector(), rms, 1e-12);
}

TEST(OpsForward, SoftmaxRowsSumToOneAndMaskedRowIsZero) {
  const float inf = INFINITY;
  Tensor x = from_vector(std::vector<float>{1, 2, 3, -inf, -inf, -inf, 1000, 0, -inf}, {3, 3});
  std::vector<float> y = softmax(x).to_float_vector();
  EXPECT_NEAR(y[0] + y[1] + y[2], 1.0, 1e-6);
  EXPECT_NEAR(y[2] / y[1], std::exp(1.0), 1e-4);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(y[j], 0.0f);
  EXPECT_EQ(y[6], 1.0f);  // no overflow for large logits
  EXPECT_EQ(y[8], 0.0f);
}

// Naive attention: one query row at a time, causal aligned to the end, mask [B, Tk].
Vec naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const std::vector<int64_t>& mask,
                    double scale) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2);
  Vec qv = q.to_double_vector(), kv = k.to_double_vector(), vv = v.to_double_vector(), out(size_t(B * H * Tq * D), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        Vec s(size_t(Tk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          if ((causal && j > i + Tk - Tq) || (!mask.empty() && !mask[size_t(b * Tk + j)])) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += qv[size_t(((b * H + h) * Tq + i) * D + c)] * kv[size_t(((b * H + h) * Tk + j) * D + c)];
          s[size_t(j)] = d * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // sees nothing: zeros
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t c = 0; c < D; ++c)
            out[size_t(((b * H + h) * Tq + i) * D + c)] += s[size_t(j)] / z * vv[size_t(((b * H + h) * Tk + j) * D + c)];
      }
  return out;
}

TEST(OpsForward, AttentionMatchesNaive) {
  std::vector<int64_t> mask{1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0};
  Tensor m = from_ints(mask, {2, 7}, DType::U8);
  struct Case { int64_t tq, tk; bool causal, masked; double scale; };
  for (Case c : {Case{7, 7, false, false, 0}, Case{7, 7, true, false, 0}, Case{3, 7, true, true, 0},
                 Case{7, 7, true, true, 0.2}, Case{9, 7, true, false, 0}, Case{4, 7, false, true, 0}}) {
    Tensor q = rnd({2, 3, c.tq, 4}, 10), k = rnd({2, 3, c.tk, 4}, 11), v = rnd({2, 3, c.tk, 4}, 12);
    Tensor out = scaled_dot_product_attention(q, k, v, c.causal, c.masked ? m : Tensor(), c.scale);
    expect_close(out.to_double_vector(),
                 naive_attention(q, k, v, c.causal, c.masked ? mask : std::vector<int64_t>{},
                                 c.scale > 0 ? double(float(c.scale)) : 0.5),  // the kernels take a float scale
                 1e-12);
  }
}

TEST(OpsForward, FullyMaskedAttentionIsZeroNotNan) {
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor q = rnd({2, 1, 3, 4}, 13, dt), k = rnd({2, 1, 3, 4}, 14, dt), v = rnd({2, 1, 3, 4}, 15, dt);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    Tensor mask = from_ints({1, 1, 0, 0, 0, 0}, {2, 3}, DType::U8);
    Tensor out = scaled_dot_product_attention(q, k, v, false, mask);
    std::vector<float> o = out.to_float_vector();
    for (size_t i = 12; i < 24; ++i) EXPECT_EQ(o[i], 0.0f);
    sum_all(cast(out, DType::F32)).backward();
    for (Tensor* t : {&q, &k, &v}) {
      std::vector<float> g = t->grad().to_float_vector();
      for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(std::isfinite(g[i]));
      for (size_t i = 12; i < 24; ++i) EXPECT_EQ(g[i], 0.0f);
    }
  }
}

TEST(OpsForward, AttentionAllocatesNoScoreMatrix) {
  const int64_t T = 64;
  Tensor q = rnd({1, 2, T, 8}, 16, DType::F32), k = rnd({1, 2, T, 8}, 17, DType::F32), v = rnd({1, 2, T, 8}, 18, DType::F32);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  Allocator& a = allocator_for(Device::cpu());
  a.clear_history();
  a.set_history(true);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  out.backward(out.detach());
  a.set_history(false);
  for (const MemoryEvent& e : a.history()) EXPECT_LT(e.requested, 2 * T * T * 4) << "an allocation of Tq x Tk size";
  a.clear_history();
}

TEST(OpsForward, EmbeddingGathersRows) {
  Tensor w = rnd({4, 3}, 19);
  Vec wv = w.to_double_vector();
  Tensor out = embedding(from_ints({2, 0, 2}, {1, 3}), w);
  EXPECT_EQ(out.shape(), (Shape{1, 3, 3}));
  Vec o = out.to_double_vector();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(o[size_t(j)], wv[size_t(6 + j)]);
    EXPECT_EQ(o[size_t(3 + j)], wv[size_t(j)]);
  }
  EXPECT_NO_THROW(embedding(from_ints({3}, {1}, DType::I32), w));
  EXPECT_THROW(embedding(from_ints({4}, {1}), w), Error);
  EXPECT_THROW(embedding(from_ints({-1}, {1}), w), Error);
}

// A loader's batch carries the bytes it uploaded (Storage::host_copy): the id and target checks
// read those, not the device, so they still catch a bad id without waiting for the device.
// Here the copy differs from the data on purpose, to show which one is read.
TEST(OpsForward, IdChecksReadTheLoadersHostCopy) {
  Tensor w = rnd({4, 3}, 19);
  auto host_copy = [](std::initializer_list<int64_t> v) {
    const std::vector<int64_t> ids(v);
    const char* p = reinterpret_cast<const char*>(ids.data());
    return std::make_shared<const std::vector<char>>(p, p + ids.size() * sizeof(int64_t));
  };
  Tensor ids = from_ints({1, 2, 3}, {3});
  EXPECT_NO_THROW(embedding(ids, w));
  ids.storage()->host_copy = host_copy({1, 9, 3});
  try {
    embedding(ids, w);
    ADD_FAILURE() << "the host copy's id 9 was not checked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 9 is out of range"), std::string::npos) << e.what();
  }
  // A view of the batch (a rank's rows) reads its own part of the copy.
  Tensor tail = slice(ids, 0, 2, 3);
  EXPECT_NO_THROW(embedding(tail, w));
  Tensor logits = rnd({3, 4}, 20);
  Tensor targets = from_ints({0, 1, 2}, {3});
  targets.storage()->host_copy = host_copy({0, 7, 2});
  EXPECT_THROW(cross_entropy(logits, targets), Error);
}

TEST(OpsForward, RotaryRotatesHalves) {
  // D = 4: pairs (0, 2) at angle p * 1, (1, 3) at angle p * base^(-1/2). The op takes angles,
  // cos and sin in f32 as transformers does: within f32 rounding of the exact rotation.
  const double base = 100.0;
  const int64_t offset = 2;
  Tensor x = rnd({1, 2, 3, 4}, 20);
  Vec xv = x.to_double_vector(), y = rotary_embedding(x, base, offset).to_double_vector();
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 2; ++j) {
        const double a = double(offset + t) * std::pow(base, -2.0 * j / 4.0);
        const size_t r = size_t((h * 3 + t) * 4);
        EXPECT_NEAR(y[r + j], xv[r + j] * std::cos(a) - xv[r + j + 2] * std::sin(a), 2e-6);
        EXPECT_NEAR(y[r + j + 2], xv[r + j + 2] * std::cos(a) + xv[r + j] * std::sin(a), 2e-6);
      }
  EXPECT_THROW(rotary_embedding(rnd({1, 1, 2, 3}, 21)), Error);
}

TEST(OpsForward, CrossEntropyMatchesLogSoftmax) {
  Tensor logits = rnd({4, 5}, 22);
  Vec lv = logits.to_double_vector();
  std::vector<int64_t> tg{3, -100, 0, 4};
  Tensor t = from_ints(tg, {4});
  Vec rows(4, 0.0);
  for (int i = 0; i < 4; ++i) {
    if (tg[size_t(i)] < 0) continue;
    double z = 0;
    for (int j = 0; j < 5; ++j) z += std::exp(lv[size_t(i * 5 + j)]);
    rows[size_t(i)] = std::log(z) - lv[size_t(i * 5 + tg[size_t(i)])];
  }
  expect_close(cross_entropy(logits, t, -100, Reduction::None).to_double_vector(), rows, 1e-12);
  EXPECT_NEAR(cross_entropy(logits, t, -100, Reduction::Sum).item(), rows[0] + rows[2] + rows[3], 1e-12);
  // The mean's 1/count is a float kernel argument: f64 loses precision there only.
  EXPECT_NEAR(cross_entropy(logits, t).item(), (rows[0] + rows[2] + rows[3]) / 3, 1e-7);
  // Loss is f32 for 16-bit logits; an all-ignored batch gives 0, not NaN.
  Tensor lb = cast(logits, DType::BF16);
  EXPECT_EQ(cross_entropy(lb, t).dtype(), DType::F32);
  EXPECT_EQ(cross_entropy(lb, from_ints({-100, -100, -100, -100}, {4})).item(), 0.0);
  EXPECT_THROW(cross_entropy(logits, from_ints({0, 1, 5, 2}, {4})), Error);
  EXPECT_THROW(cross_entropy(logits, from_ints({0, 1, 2}, {3})), Error);
}

TEST(OpsForward, DropoutMaskScaleAndBackward) {
  Tensor x = full({4000}, 1.0, DType::F32);
  x.set_requires_grad(true);
  Generator gen(7);
  Tensor y = dropout(x, 0.25, true, gen);
  std::vector<float> yv = y.to_float_vector();
  int zeros = 0;
  for (float v : yv) {
    if (v == 0.0f) ++zeros;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / 4000.0, 0.25, 0.03);
  y.backward(full({4000}, 1.0, DType::F32));
  EXPECT_EQ(x.grad().to_float_vector(), yv);  // the same mask, regenerated
  EXPECT_EQ(gen.offset, 4000u);
  Generator g2(7);
  EXPECT_TRUE(dropout(x, 0.25, false, g2).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, g2).same(x));
  EXPECT_THROW(dropout(x, 1.5, true, g2), Error);
}

TEST(OpsForward, ShapeErrorsAreClear) {
  Tensor x = rnd({2, 4}, 23);
  EXPECT_THROW(layer_norm(x, rnd({3}, 24), Tensor()), Error);
  EXPECT_THROW(rms_norm(x, rnd({4}, 25, DType::F32)), Error);
  Tensor q = rnd({1, 2, 3, 4}, 26);
  EXPECT_THROW(scaled_dot_product_attention(q, rnd({1, 2, 3, 5}, 27), rnd({1, 2, 3, 5}, 28), false), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, false, from_ints({1, 1}, {1, 2}, DType::U8)), Error);
  try {
    scaled_dot_product_attention(q, q, q, false, from_ints({1, 1, 1}, {1, 3}));
    FAIL() << "an i64 mask was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what_part()).find("key_padding_mask"), std::string::npos);
    EXPECT_FALSE(e.fix().empty());
  }
}

}  // namespace
