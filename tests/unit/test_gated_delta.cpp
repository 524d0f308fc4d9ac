// Gated DeltaNet's ops on the CPU against naive references written with plain ops in f64: the
// chunked gated delta rule against the token-by-token recurrence (transformers'
// torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel), values and every gradient, with
// T not a multiple of the chunk, grouped value heads and several chunk sizes; float64
// finite-difference gradchecks; the decay, the causal depthwise convolution with its SiLU, the
// gated RMSNorm and partial rotary; bf16 against the f64 result; and what the delta rule keeps.
// Packed documents (doc_pos): the delta rule and the convolution on rows of several documents equal
// each document run alone, values and every gradient, documents shorter than the kernel and
// across chunk boundaries included; on a GPU, the same against the CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "backend/backend.h"
#include "leantrain/autograd.h"
#include "leantrain/device.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "unit/delta_reference.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"
#include "unit/rel_error.h"

using namespace lt;
using test::rand64;
using test::error_of;
using namespace test::delta_ref;

namespace {

using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

// Values and gradients of sum(f(inputs) * r) for the op and the reference (r in the output's dtype).
void expect_same(const Fn& op, const Fn& ref, V in, double tol) {
  auto run = [&](const Fn& f) {
    for (Tensor& t : in) t.impl()->grad.reset();
    Tensor y = f(in);
    Generator gen(7);
    sum_all(mul(y, randn(y.shape(), gen, 1.0f, y.dtype()))).backward();
    std::vector<std::vector<double>> out{y.to_double_vector()};
    for (Tensor& t : in) out.push_back(t.requires_grad() ? t.grad().to_double_vector() : std::vector<double>{});
    return out;
  };
  auto got = run(op), want = run(ref);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "output/grad " << k;
    for (size_t i = 0; i < got[k].size(); ++i)
      ASSERT_NEAR(got[k][i], want[k][i], tol) << "output/grad " << k << " [" << i << "]";
  }
}

// Inputs of the delta rule in their ranges: g in (-1, 0) (a decay), beta in (0, 1).
V delta_inputs(int64_t B, int64_t T, int64_t Hk, int64_t Dk, int64_t Hv, int64_t Dv, uint64_t seed) {
  return {rand64({B, T, Hk, Dk}, seed), rand64({B, T, Hk, Dk}, seed + 1), rand64({B, T, Hv, Dv}, seed + 2),
          rand64({B, T, Hv}, seed + 3, -1.0, 0.0), rand64({B, T, Hv}, seed + 4, 0.0, 1.0)};
}

// Rows of documents: each row's document lengths, in order (they sum to the row's length).
using Docs = std::vector<std::vector<int64_t>>;

// doc_pos i32 [B, T] of the rows: 0, 1, 2, ... restarting at each document.
Tensor doc_positions(const Docs& rows, Device dev = Device::cpu()) {
  std::vector<int64_t> v;
  for (const auto& row : rows)
    for (int64_t n : row)
      for (int64_t i = 0; i < n; ++i) v.push_back(i);
  const int64_t B = int64_t(rows.size());
  return from_ints(v, {B, int64_t(v.size()) / B}, DType::I32, dev);
}

// f run on each document alone: the first `per_token` inputs ([B, T, ...]) cut to the document's
// [1, n, ...] slice, the others passed whole (weights); the outputs put back in place ([B, T, ...]).
Tensor each_alone(const Fn& f, const V& x, size_t per_token, const Docs& rows) {
  std::vector<Tensor> out_rows;
  for (size_t b = 0; b < rows.size(); ++b) {
    std::vector<Tensor> docs;
    int64_t at = 0;
    for (int64_t n : rows[b]) {
      V piece;
      for (size_t i = 0; i < x.size(); ++i)
        piece.push_back(i < per_token ? slice(slice(x[i], 0, int64_t(b), int64_t(b) + 1), 1, at, at + n) : x[i]);
      docs.push_back(f(piece));
      at += n;
    }
    out_rows.push_back(concat(docs, 1));
  }
  return concat(out_rows, 0);
}

// Documents shorter than a chunk, one of a single token, documents starting on a chunk's first row
// and inside one, and documents across several chunks (chunks of 4: rows 0-3, 4-7, ...).
const Docs kDocRows = {{3, 1, 4, 5, 3}, {9, 7}, {16}};

}  // namespace

TEST(GatedDelta, ChunkedEqualsTheRecurrenceWithEveryGradient) {
  // T 11 with chunks of 4 (three chunks, the last one 3 long), 4 value heads on 2 key heads.
  for (int64_t chunk : {4, 3, 1, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    expect_same([chunk](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], chunk); },
                [](const V& x) { return naive_delta_rule(x[0], x[1], x[2], x[3], x[4]); },
                delta_inputs(2, 11, 2, 5, 4, 3, 11), 1e-10);
  }
  // T a multiple of the chunk; one head; key dim larger than the value dim and the other way.
  expect_same([](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], 4); },
              [](const V& x) { return naive_delta_rule(x[0], x[1], x[2], x[3], x[4]); },
              delta_inputs(1, 8, 1, 7, 1, 2, 21), 1e-10);
  expect_same([](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], 5); },
              [](const V& x) { return naive_delta_rule(x[0], x[1], x[2], x[3], x[4]); },
              delta_inputs(2, 13, 1, 3, 3, 9, 31), 1e-10);
}

TEST(GatedDelta, PackedDocumentsEqualEachDocumentAlone) {
  // Three rows of 16: the documents of each row packed one after another (doc_pos) against each
  // document as a sequence of its own; grouped value heads (4 on 2 key heads); chunk sizes that
  // put the boundaries anywhere in a chunk.
  const Tensor dp = doc_positions(kDocRows);
  for (int64_t chunk : {4, 3, 1, 5, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    expect_same([&](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], chunk, dp); },
                [&](const V& x) {
                  return each_alone([&](const V& y) { return gated_delta_rule(y[0], y[1], y[2], y[3], y[4], chunk); }, x,
                                    5, kDocRows);
                },
                delta_inputs(3, 16, 2, 5, 4, 3, 201), 1e-10);
  }
  // In f32 (the chunk layout's f32 arithmetic): to its rounding.
  V x = delta_inputs(3, 16, 2, 5, 4, 3, 202);
  V x32;
  for (Tensor& t : x) {
    NoGradGuard ng;
    x32.push_back(cast(t, DType::F32));
    x32.back().set_requires_grad(true);
  }
  expect_same([&](const V& y) { return gated_delta_rule(y[0], y[1], y[2], y[3], y[4], 4, dp); },
              [&](const V& y) {
                return each_alone([&](const V& z) { return gated_delta_rule(z[0], z[1], z[2], z[3], z[4], 4); }, y, 5,
                                  kDocRows);
              },
              x32, 2e-5);
}

TEST(GatedDelta, OneDocumentARowIsTheRowItself) {
  // doc_pos 0..T-1 (one document a row) computes what no doc_pos does.
  const Tensor dp = doc_positions({{13}, {13}});
  for (int64_t chunk : {4, 64})
    expect_same([&](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], chunk, dp); },
                [&](const V& x) { return gated_delta_rule(x[0], x[1], x[2], x[3], x[4], chunk); },
                delta_inputs(2, 13, 1, 4, 2, 3, 203), 1e-14);
}

TEST(GatedDelta, RefusesDocumentPositionsItCannotRead) {
  V x = delta_inputs(1, 6, 1, 4, 2, 3, 204);
  auto call = [&](const Tensor& dp) { return error_of([&] { gated_delta_rule(x[0], x[1], x[2], x[3], x[4], 4, dp); }); };
  EXPECT_NE(call(from_ints({0, 1, 2, 0, 1, 2}, {1, 6}, DType::I64)).find("doc_pos is i64"), std::string::npos);
  EXPECT_NE(call(from_ints({0, 1, 2}, {1, 3}, DType::I32)).find("i32 [B, T] = [1, 6]"), std::string::npos);
  const std::string bad = call(from_ints({0, 1, 2, 4, 0, 1}, {1, 6}, DType::I32));
  EXPECT_NE(bad.find("doc_pos[0, 3] = 4"), std::string::npos) << bad;
  EXPECT_EQ(bad.find('\n'), std::string::npos);
  EXPECT_NE(call(from_ints({1, 2, 3, 0, 1, 2}, {1, 6}, DType::I32)).find("doc_pos[0, 0] = 1"), std::string::npos);
}

TEST(GatedDelta, StrongDecaysAndSaturatedBetasStayFinite) {
  // g down to -30 a step (exp underflows within a chunk) and beta at 0 and 1.
  V x = delta_inputs(1, 9, 1, 4, 2, 3, 41);
  {
    NoGradGuard ng;
    std::vector<double> gv = x[3].to_double_vector(), bv = x[4].to_double_vector();
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = i % 3 == 0 ? -30.0 : gv[i];
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = i % 4 == 0 ? 0.0 : (i % 4 == 1 ? 1.0 : bv[i]);
    x[3] = from_vector(gv, x[3].shape(), DType::F64);
    x[4] = from_vector(bv, x[4].shape(), DType::F64);
    x[3].set_requires_grad(true);
    x[4].set_requires_grad(true);
  }
  expect_same([](const V& v) { return gated_delta_rule(v[0], v[1], v[2], v[3], v[4], 4); },
              [](const V& v) { return naive_delta_rule(v[0], v[1], v[2], v[3], v[4]); }, x, 1e-9);
}

TEST(GatedDelta, Gradcheck) {
  V x = delta_inputs(1, 7, 1, 3, 2, 2, 51);
  EXPECT_TRUE(test::gradcheck([](const V& v) { return gated_delta_rule(v[0], v[1], v[2], v[3], v[4], 3); }, x));
}

TEST(GatedDelta, PackedReadsTheConvolutionOutputInPlace) {
  // qkv [B, T, 2 Hk Dk + Hv Dv] against the three tensors: the same values and one gradient.
  const int64_t B = 2, T = 6, Hk = 1, Dk = 4, Hv = 2, Dv = 3;
  Tensor qkv = rand64({B, T, 2 * Hk * Dk + Hv * Dv}, 61);
  V gb = {rand64({B, T, Hv}, 62, -1.0, 0.0), rand64({B, T, Hv}, 63, 0.0, 1.0)};
  expect_same(
      [&](const V& x) { return gated_delta_rule_packed(x[0], Hk, Dk, Hv, Dv, x[1], x[2], 4); },
      [&](const V& x) {
        Tensor q = reshape(slice(x[0], 2, 0, Hk * Dk), {B, T, Hk, Dk});
        Tensor k = reshape(slice(x[0], 2, Hk * Dk, 2 * Hk * Dk), {B, T, Hk, Dk});
        Tensor v = reshape(slice(x[0], 2, 2 * Hk * Dk, 2 * Hk * Dk + Hv * Dv), {B, T, Hv, Dv});
        return reshape(naive_delta_rule(q, k, v, x[1], x[2]), {B, T, Hv * Dv});
      },
      {qkv, gb[0], gb[1]}, 1e-10);
}

TEST(GatedDelta, Bf16MatchesTheF64Result) {
  // bf16 q, k, v, beta (f32 g): the f32 chunk arithmetic, rounded once at the output.
  V x = delta_inputs(2, 70, 2, 16, 4, 8, 71);  // T 70: a full chunk of 64 and one of 6
  Tensor ref, got;
  {
    NoGradGuard ng;
    V r;
    for (size_t i = 0; i < x.size(); ++i) r.push_back(i == 3 ? cast(x[i], DType::F32) : cast(x[i], DType::BF16));
    got = gated_delta_rule(r[0], r[1], r[2], r[3], r[4]);
    ref = naive_delta_rule(cast(r[0], DType::F64), cast(r[1], DType::F64), cast(r[2], DType::F64),
                           cast(r[3], DType::F64), cast(r[4], DType::F64));
  }
  EXPECT_EQ(got.dtype(), DType::BF16);
  EXPECT_LT(test::rel_error(got.to_double_vector(), ref.to_double_vector()), 6e-3);
}

TEST(GatedDelta, KeepsItsInputsAndOneStateAChunk) {
  // What the op holds after its forward beyond its inputs: the output and the f32 states
  // [B Hv, ceil(T / C), Dk, Dv] (512-byte rounded), nothing T^2.
  const int64_t B = 1, T = 130, Hk = 2, Dk = 32, Hv = 2, Dv = 32, C = 64;
  Generator gen(5);
  Tensor qkv = randn({B, T, 2 * Hk * Dk + Hv * Dv}, gen), g = lt::scale(rand_uniform({B, T, Hv}, gen, 0, 1), -1.0);
  Tensor beta = rand_uniform({B, T, Hv}, gen, 0, 1);
  qkv.set_requires_grad(true);
  Allocator& a = allocator_for(Device::cpu());
  const int64_t before = a.stats().allocated_bytes.current;
  Tensor out = gated_delta_rule_packed(qkv, Hk, Dk, Hv, Dv, g, beta, C);
  const int64_t held = a.stats().allocated_bytes.current - before;
  auto rounded = [](int64_t bytes) { return (bytes + 511) / 512 * 512; };
  const int64_t states = rounded(B * Hv * ((T + C - 1) / C) * Dk * Dv * 4), o = rounded(B * T * Hv * Dv * 4);
  EXPECT_EQ(held, states + o);
  out.backward(ones(out.shape()));
  EXPECT_TRUE(qkv.grad().defined());
}

TEST(GatedDelta, RefusesWhatItCannotCompute) {
  V x = delta_inputs(1, 5, 1, 4, 2, 3, 81);
  EXPECT_THROW(gated_delta_rule(x[0], x[1], x[2], x[3], x[4], 65), Error);             // chunk > 64
  EXPECT_THROW(gated_delta_rule(x[0], x[1], x[2], cast(x[3], DType::F32), x[4]), Error);  // g not the accumulation type
  V y = delta_inputs(1, 5, 2, 4, 3, 3, 82);  // 3 value heads on 2 key heads
  EXPECT_THROW(gated_delta_rule(y[0], y[1], y[2], y[3], y[4]), Error);
}

// ---------------------------------------------------------------- the decay


TEST(GatedDeltaDecay, MatchesSoftplusAndItsGradients) {
  expect_same([](const V& v) { return gated_delta_decay(v[0], v[1], v[2]); },
              [](const V& v) { return naive_decay(v[0], v[1], v[2]); },
              {rand64({3, 4, 5}, 91), rand64({5}, 92), rand64({5}, 93)}, 1e-12);
  // A column slice of a wider projection, read in place.
  Tensor ba = rand64({2, 3, 10}, 94);
  expect_same([](const V& v) { return gated_delta_decay(slice(v[0], 2, 5, 10), v[1], v[2]); },
              [](const V& v) { return naive_decay(slice(v[0], 2, 5, 10), v[1], v[2]); },
              {ba, rand64({5}, 95), rand64({5}, 96)}, 1e-12);
  // The gradient arriving as a view past its buffer's start (concat's backward) is read there.
  expect_same([](const V& v) { return concat({v[3], gated_delta_decay(v[0], v[1], v[2])}, 0); },
              [](const V& v) { return concat({v[3], naive_decay(v[0], v[1], v[2])}, 0); },
              {rand64({3, 4, 5}, 97), rand64({5}, 98), rand64({5}, 99), rand64({2, 4, 5}, 100)}, 1e-12);
  // Above torch's threshold softplus(x) is x: g = -exp(a_log) x.
  NoGradGuard ng;
  Tensor g = gated_delta_decay(full({1, 1}, 25.0, DType::F64), zeros({1}, DType::F64), zeros({1}, DType::F64));
  EXPECT_DOUBLE_EQ(g.to_double_vector()[0], -25.0);
  EXPECT_EQ(gated_delta_decay(zeros({2, 3}, DType::BF16), zeros({3}, DType::F32), zeros({3}, DType::BF16)).dtype(),
            DType::F32);
}

TEST(GatedDeltaDecay, Gradcheck) {
  EXPECT_TRUE(test::gradcheck([](const V& v) { return gated_delta_decay(v[0], v[1], v[2]); },
                              {rand64({4, 3}, 97), rand64({3}, 98), rand64({3}, 99)}));
}

// ---------------------------------------------------------------- the convolution


TEST(CausalConv1d, MatchesTheNaiveConvolutionWithEveryGradient) {
  for (bool s : {true, false})
    expect_same([s](const V& v) { return causal_conv1d(v[0], v[1], s); },
                [s](const V& v) { return naive_conv(v[0], v[1], s); }, {rand64({2, 7, 5}, 101), rand64({5, 4}, 102)},
                1e-12);
  // K longer than T; x a column slice of a projection (read in place).
  expect_same([](const V& v) { return causal_conv1d(slice(v[0], 2, 2, 8), v[1]); },
              [](const V& v) { return naive_conv(slice(v[0], 2, 2, 8), v[1], true); },
              {rand64({2, 3, 9}, 103), rand64({6, 5}, 104)}, 1e-12);
}

TEST(CausalConv1d, PackedDocumentsEqualEachDocumentAlone) {
  // Four taps against documents of 1, 2 and 3 tokens (shorter than the kernel) and longer ones.
  const Docs rows = {{1, 2, 3, 5, 1}, {12}, {4, 4, 2, 2}};
  const Tensor dp = doc_positions(rows);
  for (bool s : {true, false})
    expect_same([&](const V& v) { return causal_conv1d(v[0], v[1], s, dp); },
                [&](const V& v) {
                  return each_alone([&](const V& y) { return causal_conv1d(y[0], y[1], s); }, v, 1, rows);
                },
                {rand64({3, 12, 5}, 205), rand64({5, 4}, 206)}, 1e-12);
  // x a column slice of a projection (read in place), K 6 longer than most documents.
  expect_same([&](const V& v) { return causal_conv1d(slice(v[0], 2, 2, 8), v[1], true, dp); },
              [&](const V& v) {
                return each_alone([&](const V& y) { return causal_conv1d(slice(y[0], 2, 2, 8), y[1]); }, v, 1, rows);
              },
              {rand64({3, 12, 9}, 207), rand64({6, 6}, 208)}, 1e-12);
  EXPECT_NE(error_of([&] { causal_conv1d(rand64({3, 12, 5}, 209), rand64({5, 4}, 210), true, doc_positions({{12}})); })
                .find("i32 [B, T] = [3, 12]"),
            std::string::npos);
}

TEST(CausalConv1d, Gradcheck) {
  EXPECT_TRUE(test::gradcheck([](const V& v) { return causal_conv1d(v[0], v[1]); },
                              {rand64({2, 6, 3}, 105), rand64({3, 4}, 106)}));
}

TEST(CausalConv1d, Bf16RoundsTheConvolutionThenTheSilu) {
  Tensor x = rand64({2, 9, 6}, 107), w = rand64({6, 4}, 108);
  NoGradGuard ng;
  Tensor xb = cast(x, DType::BF16), wb = cast(w, DType::BF16);
  Tensor got = causal_conv1d(xb, wb);
  // torch: conv1d's bf16 output, then silu of it, rounded again.
  Tensor pre = cast(cast(naive_conv(cast(xb, DType::F64), cast(wb, DType::F64), false), DType::BF16), DType::F64);
  Tensor want = cast(silu(pre), DType::BF16);
  EXPECT_EQ(got.to_double_vector(), want.to_double_vector());
}

// ---------------------------------------------------------------- the gated norm


TEST(RmsNormGated, MatchesTheNaiveNormWithEveryGradient) {
  expect_same([](const V& v) { return rms_norm_gated(v[0], v[1], v[2], 1e-6); },
              [](const V& v) { return naive_gated_norm(v[0], v[1], v[2], 1e-6); },
              {rand64({2, 3, 12}, 111), rand64({2, 3, 12}, 112), rand64({4}, 113)}, 1e-12);
  // z a column slice of a wider projection; more rows than one weight part (256 rows a part).
  expect_same([](const V& v) { return rms_norm_gated(v[0], slice(v[1], 2, 3, 9), v[2], 1e-5); },
              [](const V& v) { return naive_gated_norm(v[0], slice(v[1], 2, 3, 9), v[2], 1e-5); },
              {rand64({3, 300, 6}, 114), rand64({3, 300, 11}, 115), rand64({3}, 116)}, 1e-11);
}

TEST(RmsNormGated, GradientArrivingAsAnOffsetViewIsReadWhereItIs) {
  // concat's backward hands each input a view of one gradient buffer: the norm's rows start past
  // the first input's, and its backward must read them there (it once read from offset 0).
  expect_same([](const V& v) { return concat({v[3], rms_norm_gated(v[0], v[1], v[2], 1e-6)}, 0); },
              [](const V& v) { return concat({v[3], naive_gated_norm(v[0], v[1], v[2], 1e-6)}, 0); },
              {rand64({2, 3, 12}, 131), rand64({2, 3, 12}, 132), rand64({4}, 133), rand64({1, 3, 12}, 134)}, 1e-12);
}

TEST(RmsNormGated, FrozenWeightGivesTheSameInputGradientsAndNoWeightGradient) {
  // Under LoRA the norm's weight is frozen: the backward then sums no weight parts (it skips that
  // kernel on CUDA) and x's and z's gradients are the same bits as with the weight trained.
  auto grads = [](bool train_w) {
    Tensor x = rand64({3, 300, 6}, 141), z = rand64({3, 300, 6}, 142), w = rand64({3}, 143);
    x.set_requires_grad(true), z.set_requires_grad(true), w.set_requires_grad(train_w);
    Tensor y = rms_norm_gated(x, z, w, 1e-6);
    y.backward(rand64({3, 300, 6}, 144));
    EXPECT_EQ(w.grad().defined(), train_w);
    return std::pair{x.grad().to_double_vector(), z.grad().to_double_vector()};
  };
  const auto trained = grads(true), frozen = grads(false);
  EXPECT_EQ(trained.first, frozen.first);
  EXPECT_EQ(trained.second, frozen.second);
}

TEST(RmsNormGated, Gradcheck) {
  EXPECT_TRUE(test::gradcheck([](const V& v) { return rms_norm_gated(v[0], v[1], v[2]); },
                              {rand64({3, 8}, 117), rand64({3, 8}, 118), rand64({4}, 119)}));
}

TEST(RmsNormGated, Bf16RoundsAsTransformers) {
  // Qwen3_5RMSNormGated in bf16: n = x rstd rounded, w n rounded, times silu(z) in f32, rounded.
  Tensor x = rand64({5, 16}, 121), z = rand64({5, 16}, 122), w = rand64({8}, 123);
  NoGradGuard ng;
  Tensor xb = cast(x, DType::BF16), zb = cast(z, DType::BF16), wb = cast(w, DType::BF16);
  Tensor got = rms_norm_gated(xb, zb, wb, 1e-6);
  Tensor xf = reshape(cast(xb, DType::F64), {5, 2, 8});
  Tensor ms = div(sum(mul(xf, xf), {-1}, true), full({1}, 8.0, DType::F64));
  Tensor n = cast(cast(cast(div(xf, sqrt(add_scalar(ms, 1e-6))), DType::F32), DType::BF16), DType::F64);
  Tensor p = cast(cast(mul(n, cast(wb, DType::F64)), DType::BF16), DType::F64);
  Tensor want = cast(mul(p, silu(reshape(cast(zb, DType::F64), {5, 2, 8}))), DType::BF16);
  EXPECT_LT(test::rel_error(got.to_double_vector(), reshape(want, {5, 16}).to_double_vector()), 1e-2);
}

// ---------------------------------------------------------------- partial rotary

TEST(PartialRotary, RotatesTheFirstDimsOfEachHeadOnly) {
  // heads of 10, the first 4 dims rotated (2 frequencies) on the first 2 of 3 heads
  const std::vector<float> inv = {1.0f, 0.1f};
  Tensor x = rand64({2, 5, 30}, 131);
  Tensor y;
  {
    NoGradGuard ng;
    y = rotary_embedding_packed(x, inv, 2, 3, 10);
  }
  const std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 10; ++d) {
          const size_t i = size_t(((b * 5 + t) * 3 + h) * 10 + d);
          if (h >= 2 || d >= 4) {
            EXPECT_EQ(yv[i], xv[i]);
            continue;
          }
          const int64_t j = d % 2, pair = d < 2 ? d + 2 : d - 2;
          const float ang = inv[size_t(j)] * float(3 + t);
          const double c = double(float(std::cos(double(ang)))), s = double(float(std::sin(double(ang))));
          const size_t ip = i - size_t(d) + size_t(pair);
          const double want = d < 2 ? xv[i] * c - xv[ip] * s : xv[i] * c + xv[ip] * s;
          EXPECT_NEAR(yv[i], want, 1e-12) << b << " " << t << " " << h << " " << d;
        }
  EXPECT_TRUE(test::gradcheck([&](const V& v) { return rotary_embedding_packed(v[0], inv, 2, 3, 10); }, {x}));
  EXPECT_THROW(rotary_embedding_packed(x, inv, 2, 0, 3), Error);  // a head narrower than the rotated dims
}

// ---------------------------------------------------------------- on the GPU

// The 2B shape's heads (16 key and value heads of 128, chunks of 64) on CUDA against the CPU in f32
// at T 300 (4 chunks and 44): the output and every gradient of q | k | v, g and beta; then the time
// of a forward and a backward at T 4096 in bf16 (printed, the figure a Qwen3.5 layer pays per pass).
TEST(GatedDelta, CudaMatchesTheCpuAtTheTwoBHeadsAndTimesT4096) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const int64_t Hk = 16, Dk = 128, Hv = 16, Dv = 128, W = 2 * Hk * Dk + Hv * Dv;
  auto run = [&](Device dev, DType dt, int64_t B, int64_t T, bool grads) {
    Generator gen(21);
    Tensor qkv = randn({B, T, W}, gen, 1.0f, dt).to(dev);
    Tensor graw = randn({B, T, Hv}, gen, 1.0f, DType::F32).to(dev), braw = randn({B, T, Hv}, gen, 1.0f, dt).to(dev);
    Tensor gout = randn({B, T, Hv, Dv}, gen, 1.0f, dt).to(dev);
    for (Tensor* t : {&qkv, &graw, &braw}) t->set_requires_grad(grads);
    Tensor g = lt::scale(sigmoid(graw), -1.0), beta = sigmoid(braw);
    Tensor out = gated_delta_rule_packed(qkv, Hk, Dk, Hv, Dv, g, beta, 64);
    if (grads) out.backward(gout);
    std::vector<std::vector<double>> r{out.to_double_vector()};
    if (grads)
      for (Tensor* t : {&qkv, &graw, &braw}) r.push_back(t->grad().to_double_vector());
    return r;
  };
  const auto cpu = run(Device::cpu(), DType::F32, 1, 300, true), gpu = run(Device::cuda(), DType::F32, 1, 300, true);
  for (size_t k = 0; k < cpu.size(); ++k)
    EXPECT_LT(test::rel_error(gpu[k], cpu[k]), 2e-5) << (k == 0 ? "output" : "gradient " + std::to_string(k - 1));
  // Timing: bf16, B 1, T 4096.
  const Device gpu_dev = Device::cuda();
  Backend& be = backend_for(gpu_dev);
  Generator gen(22);
  const int64_t T = 4096;
  Tensor qkv = randn({1, T, W}, gen, 1.0f, DType::BF16, gpu_dev);
  Tensor g = lt::scale(sigmoid(randn({1, T, Hv}, gen, 1.0f, DType::F32, gpu_dev)), -1.0);
  Tensor beta = sigmoid(randn({1, T, Hv}, gen, 1.0f, DType::BF16, gpu_dev));
  Tensor gout = randn({1, T, Hv, Dv}, gen, 1.0f, DType::BF16, gpu_dev);
  qkv.set_requires_grad(true);
  auto time_ms = [&](const std::function<void()>& f) {
    f();
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) f();
    be.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 5;
  };
  const double fwd = time_ms([&] {
    NoGradGuard ng;
    gated_delta_rule_packed(qkv, Hk, Dk, Hv, Dv, g, beta, 64);
  });
  const double both = time_ms([&] {
    Tensor out = gated_delta_rule_packed(qkv, Hk, Dk, Hv, Dv, g, beta, 64);
    out.backward(gout);
    qkv.impl()->grad.reset();
  });
  std::printf("time gated_delta_rule bf16 B1 T4096 Hk16 Hv16 Dk128 Dv128 C64: fwd %.3f ms, fwd+bwd %.3f ms\n", fwd,
              both);
}

// The register-tiled state passes (delta_state.cu, the default) sum every output over the same
// terms in the same order as delta.cu's one-output-a-thread kernels: the same bits, output and
// every gradient, f32 and bf16, a chunk of 64 and one of 32 (T 300: a partial last chunk).
TEST(GatedDelta, CudaTiledStatePassesGiveTheUntiledBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const int64_t Hk = 2, Dk = 128, Hv = 4, Dv = 128, W = 2 * Hk * Dk + Hv * Dv, T = 300;
  auto run = [&](DType dt, int64_t chunk, const char* tiled) {
    ::setenv("LEANTRAIN_GDN_TILED", tiled, 1);
    Generator gen(41);
    const Device dev = Device::cuda();
    Tensor qkv = randn({2, T, W}, gen, 1.0f, dt).to(dev);
    Tensor graw = randn({2, T, Hv}, gen, 1.0f, DType::F32).to(dev), braw = randn({2, T, Hv}, gen, 1.0f, dt).to(dev);
    Tensor gout = randn({2, T, Hv, Dv}, gen, 1.0f, dt).to(dev);
    for (Tensor* t : {&qkv, &graw, &braw}) t->set_requires_grad(true);
    Tensor out = gated_delta_rule_packed(qkv, Hk, Dk, Hv, Dv, lt::scale(sigmoid(graw), -1.0), sigmoid(braw), chunk);
    out.backward(gout);
    std::vector<std::vector<double>> r{out.to_double_vector()};
    for (Tensor* t : {&qkv, &graw, &braw}) r.push_back(t->grad().to_double_vector());
    ::unsetenv("LEANTRAIN_GDN_TILED");
    return r;
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t chunk : {64, 32}) {
      const auto tiled = run(dt, chunk, "1"), untiled = run(dt, chunk, "0");
      ASSERT_EQ(tiled.size(), untiled.size());
      for (size_t k = 0; k < tiled.size(); ++k)
        EXPECT_EQ(tiled[k], untiled[k]) << dtype_name(dt) << " chunk " << chunk << (k == 0 ? " output" : " gradient ")
                                        << (k == 0 ? "" : std::to_string(k - 1));
    }
}

// Packed documents on the GPU (f32): the delta rule at the 2B shape's head dims (128, chunks of
// 64) and the convolution on rows of documents from 1 token to several chunks, against the CPU
// (output and every gradient) and against each document run alone on the GPU.
TEST(GatedDelta, CudaPackedDocumentsMatchTheCpuAndEachDocumentAlone) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const int64_t Hk = 2, Dk = 128, Hv = 4, Dv = 128, W = 2 * Hk * Dk + Hv * Dv, T = 300;
  const Docs rows = {{1, 63, 64, 2, 130, 3, 37}, {300}, {200, 65, 35}};
  const int64_t B = int64_t(rows.size());
  auto run = [&](Device dev, bool alone) {
    Generator gen(31);
    Tensor qkv = randn({B, T, W}, gen, 1.0f, DType::F32).to(dev);
    Tensor graw = randn({B, T, Hv}, gen, 1.0f, DType::F32).to(dev), braw = randn({B, T, Hv}, gen, 1.0f).to(dev);
    Tensor w = randn({W, 4}, gen, 0.5f, DType::F32).to(dev);
    Tensor gout = randn({B, T, Hv, Dv}, gen, 1.0f, DType::F32).to(dev);
    for (Tensor* t : {&qkv, &graw, &braw, &w}) t->set_requires_grad(true);
    const Fn f = [&](const V& x) {
      const int64_t n = x[0].size(0), t = x[0].size(1);
      Tensor conv = causal_conv1d(x[0], x[3], true, x.size() > 4 ? x[4] : Tensor());
      Tensor g = lt::scale(sigmoid(x[1]), -1.0), beta = sigmoid(x[2]);
      return reshape(gated_delta_rule_packed(conv, Hk, Dk, Hv, Dv, g, beta, 64, x.size() > 4 ? x[4] : Tensor()),
                     {n, t, Hv, Dv});
    };
    const V in = {qkv, graw, braw, w};
    Tensor out = alone ? each_alone([&](const V& y) { return f({y[0], y[1], y[2], y[3]}); }, in, 3, rows)
                       : f({qkv, graw, braw, w, doc_positions(rows, dev)});
    out.backward(gout);
    std::vector<std::vector<double>> r{out.to_double_vector()};
    for (Tensor* t : {&qkv, &graw, &braw, &w}) r.push_back(t->grad().to_double_vector());
    return r;
  };
  const auto cpu = run(Device::cpu(), false), gpu = run(Device::cuda(), false), gpu_alone = run(Device::cuda(), true);
  for (size_t k = 0; k < cpu.size(); ++k) {
    const std::string what = k == 0 ? "output" : "gradient " + std::to_string(k - 1);
    EXPECT_LT(test::rel_error(gpu[k], cpu[k]), 2e-5) << what;
    EXPECT_LT(test::rel_error(gpu[k], gpu_alone[k]), 2e-5) << what << " (each document alone)";
  }
}
