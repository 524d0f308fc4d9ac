// Float64 gradchecks of norms, softmax, attention, embeddings, cross-entropy and dropout.
#include "backend/backend.h"
#include "leantrain/error.h"
#include "unit/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

using V = std::vector<Tensor>;

TEST(Gradcheck, LayerNorm) {
  EXPECT_TRUE(gradcheck([](const V& x) { return layer_norm(x[0], x[1], x[2]); },
                        {rand64({2, 3, 8}, 1), rand64({8}, 2), rand64({8}, 3)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return layer_norm(x[0], x[1], Tensor(), 1e-3); },
                        {rand64({4, 6}, 4), rand64({6}, 5)}));
}

TEST(Gradcheck, LayerNormPartialGrads) {
  Tensor w = rand64({6}, 7), b = rand64({6}, 8);
  w.set_requires_grad(false);
  EXPECT_TRUE(gradcheck([&](const V& x) { return layer_norm(x[0], w, x[1]); }, {rand64({3, 6}, 6), b}));
  Tensor x = rand64({3, 6}, 9);
  x.set_requires_grad(false);
  EXPECT_TRUE(gradcheck([&](const V& p) { return layer_norm(x, p[0], p[1]); }, {rand64({6}, 10), rand64({6}, 11)}));
  // Bias only: no kernel backward, just the row sum.
  EXPECT_TRUE(gradcheck([&](const V& p) { return layer_norm(x, w, p[0]); }, {rand64({6}, 12)}));
}

TEST(Gradcheck, RmsNorm) {
  EXPECT_TRUE(gradcheck([](const V& x) { return rms_norm(x[0], x[1]); }, {rand64({2, 3, 8}, 13), rand64({8}, 14)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return rms_norm(x[0], x[1], 1e-6, true); },
                        {rand64({2, 3, 8}, 15), rand64({8}, 16)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return add_rms_norm(x[0], x[1], x[2], 1e-6, true).y; },
                        {rand64({3, 8}, 17), rand64({3, 8}, 18), rand64({8}, 19)}));
}

TEST(Gradcheck, Softmax) {
  EXPECT_TRUE(gradcheck([](const V& x) { return softmax(x[0]); }, {rand64({3, 7}, 15)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return softmax(transpose(x[0], 0, 1)); }, {rand64({5, 3}, 16)}));
}

V qkv(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, uint64_t seed) {
  return {rand64({B, H, Tq, D}, seed), rand64({B, H, Tk, D}, seed + 1), rand64({B, H, Tk, D}, seed + 2)};
}

TEST(Gradcheck, Attention) {
  for (bool causal : {false, true})
    EXPECT_TRUE(gradcheck([=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
                          qkv(2, 2, 5, 5, 4, 17)))
        << "causal " << causal;
}

TEST(Gradcheck, AttentionPaddedAndCrossLength) {
  // Batch 0 attends to keys 0, 2, 3, 5; batch 1 to none (its output and gradients are 0).
  Tensor mask = from_ints({1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 6}, DType::U8);
  for (bool causal : {false, true}) {
    EXPECT_TRUE(gradcheck([&](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal, mask); },
                          qkv(2, 1, 6, 6, 3, 20)))
        << "padded causal " << causal;
    // Tq < Tk (a new chunk over a longer context) and Tq > Tk (early queries see nothing).
    EXPECT_TRUE(gradcheck([=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
                          qkv(1, 2, 3, 7, 4, 23)))
        << "Tq<Tk causal " << causal;
    EXPECT_TRUE(gradcheck([=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal, {}, 0.3); },
                          qkv(1, 2, 5, 3, 4, 26)))
        << "Tq>Tk causal " << causal;
  }
}

TEST(Gradcheck, Embedding) {
  Tensor ids = from_ints({3, 0, 3, 4, 1, 3}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const V& x) { return embedding(ids, x[0]); }, {rand64({5, 4}, 29)}));
}

// A table with a gradient sink: its lookups hand (ids, rows) to the sink and leave .grad alone;
// the rows are the lookup's upstream gradient, and the sink adding them into .grad with
// embedding_bwd gives the plain lookup's gradient. Removing the sink restores the plain path.
TEST(Gradcheck, EmbeddingTableGradSink) {
  Tensor ids = from_ints({3, 0, 3, 4, 1, 3}, {2, 3});
  Tensor table = rand64({5, 4}, 29).set_requires_grad(true);
  Tensor upstream = rand64({2, 3, 4}, 31);
  Tensor got_ids, got_rows;
  int64_t got_skip = -2;
  set_table_grad_sink(table, [&](const Tensor& i, const Tensor& r, int64_t skip) {
    got_ids = i.clone(), got_rows = r.clone(), got_skip = skip;
  });
  sum_all(mul(embedding(ids, table), upstream)).backward();
  EXPECT_FALSE(table.grad().defined());
  ASSERT_TRUE(got_rows.defined());
  EXPECT_EQ(got_rows.shape(), (Shape{6, 4}));
  EXPECT_EQ(got_ids.numel(), 6);
  EXPECT_EQ(got_rows.to_double_vector(), upstream.to_double_vector());
  EXPECT_EQ(got_skip, -1);
  Tensor summed = zeros({5, 4}, DType::F64);
  backend_for(Device::cpu()).embedding_bwd(summed, got_rows, got_ids, -1);
  set_table_grad_sink(table, {});
  sum_all(mul(embedding(ids, table), upstream)).backward();
  ASSERT_TRUE(table.grad().defined());
  EXPECT_EQ(table.grad().to_double_vector(), summed.to_double_vector());
  // embedding_bwd adds into what the gradient holds already.
  backend_for(Device::cpu()).embedding_bwd(summed, got_rows, got_ids, -1);
  const std::vector<double> twice = summed.to_double_vector(), once = table.grad().to_double_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]);
}

// padding_idx as torch's nn.Embedding: the lookups of that id add nothing to the gradient, the
// other rows get the plain lookup's gradient, and the forward is unchanged.
TEST(Gradcheck, EmbeddingPaddingIdx) {
  Tensor ids = from_ints({3, 0, 3, 4, 1, 3}, {2, 3});
  Tensor upstream = rand64({2, 3, 4}, 31);
  Tensor plain = rand64({5, 4}, 29).set_requires_grad(true);
  Tensor padded = rand64({5, 4}, 29).set_requires_grad(true);
  sum_all(mul(embedding(ids, plain), upstream)).backward();
  Tensor out = embedding(ids, padded, 3);
  EXPECT_EQ(out.to_double_vector(), embedding(ids, plain.detach()).to_double_vector());
  sum_all(mul(out, upstream)).backward();
  const std::vector<double> a = plain.grad().to_double_vector(), b = padded.grad().to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i], i / 4 == 3 ? 0.0 : a[i]) << i;
  EXPECT_THROW(embedding(ids, padded, 5), Error);
  EXPECT_THROW(embedding(ids, padded, -2), Error);
}

TEST(Gradcheck, Rotary) {
  EXPECT_TRUE(gradcheck([](const V& x) { return rotary_embedding(x[0], 100.0, 3); }, {rand64({2, 2, 5, 6}, 30)}));
}

TEST(Gradcheck, RotaryPacked) {
  // 3 rotated heads of 6 (q, k) and one passed through (v); a position offset.
  EXPECT_TRUE(gradcheck([](const V& x) { return rotary_embedding_packed(x[0], {1.0f, 0.2f, 0.05f}, 3, 7); },
                        {rand64({2, 4, 4 * 6}, 32)}));
}

TEST(Gradcheck, Swiglu) {
  EXPECT_TRUE(gradcheck([](const V& x) { return swiglu_packed(x[0]); }, {rand64({2, 3, 2 * 5}, 33)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return swiglu(x[0], x[1]); }, {rand64({3, 4}, 34), rand64({3, 4}, 35)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return swiglu_linear(x[0], x[1], x[2]); },
                        {rand64({2, 3, 2 * 5}, 36), rand64({4, 5}, 37), rand64({4}, 38)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return swiglu_linear(x[0], x[1], Tensor()); },
                        {rand64({3, 2 * 6}, 39), rand64({2, 6}, 40)}));
}

TEST(Gradcheck, Geglu) {
  const GateAct g = GateAct::GeluTanh;
  EXPECT_TRUE(gradcheck([g](const V& x) { return swiglu_packed(x[0], g); }, {rand64({2, 3, 2 * 5}, 41)}));
  EXPECT_TRUE(gradcheck([g](const V& x) { return swiglu(x[0], x[1], g); }, {rand64({3, 4}, 42), rand64({3, 4}, 43)}));
  EXPECT_TRUE(gradcheck([g](const V& x) { return swiglu_linear(x[0], x[1], x[2], g); },
                        {rand64({2, 3, 2 * 5}, 44), rand64({4, 5}, 45), rand64({4}, 46)}));
}

TEST(Gradcheck, CrossEntropy) {
  Tensor targets = from_ints({2, -100, 0, 4, 4}, {5});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
    EXPECT_TRUE(gradcheck([&](const V& x) { return cross_entropy(x[0], targets, -100, r); }, {rand64({5, 6}, 31)}))
        << "reduction " << int(r);
  // A custom ignore index and [B, T, V] logits.
  Tensor t3 = from_ints({1, 5, 0, 5}, {2, 2});
  EXPECT_TRUE(gradcheck([&](const V& x) { return cross_entropy(x[0], t3, 5); }, {rand64({2, 2, 5}, 32)}));
}

TEST(Gradcheck, Dropout) {
  EXPECT_TRUE(gradcheck(
      [](const V& x) {
        Generator gen(42);  // the same mask at every evaluation
        return dropout(x[0], 0.4, true, gen);
      },
      {rand64({4, 5}, 33)}));
}

}  // namespace
