// Sliding-window and packed-document masks (AttentionMask::window, ::doc_pos) on every path that
// reaches the attention kernels: scaled_dot_product_attention, both self_attention_packed
// overloads and attention_linear. Checked against a naive dense masked softmax(QK^T)V written
// here in f64 (forward and the gradients of q, k, v), on the CPU in f64 and f32 and, where a GPU
// answers, on CUDA (tensor-core, register-tiled f32 and SIMT kernels) against the CPU in f64.
// Plus one-line errors for bad inputs, and the memory a masked call allocates (no more than causal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <chrono>
#include <cstdio>
#include <functional>

#include "backend/backend.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "unit/error_of.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

using Vals = std::vector<double>;

struct Case {
  int64_t B, H, Hkv, Tq, Tk, D;
  int64_t window;
  std::vector<int64_t> docs;  // document lengths of every row (summing to T), or empty
  bool padded = false;        // key padding on top
};

std::string case_str(const Case& c) {
  std::string d;
  for (int64_t x : c.docs) d += std::to_string(x) + ",";
  return "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + " Tq " +
         std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " D " + std::to_string(c.D) + " window " +
         std::to_string(c.window) + (d.empty() ? "" : " docs " + d) + (c.padded ? " padded" : "");
}

// doc_pos of row b: the documents' lengths, rotated by b so that rows differ.
std::vector<int64_t> doc_pos_values(const Case& c) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<int64_t> lens = c.docs;
    std::rotate(lens.begin(), lens.begin() + int64_t(b % lens.size()), lens.end());
    for (int64_t len : lens)
      for (int64_t p = 0; p < len; ++p) out.push_back(p);
  }
  return out;
}

std::vector<int64_t> padding_values(const Case& c) {
  std::vector<int64_t> m(size_t(c.B * c.Tk));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t t = 0; t < c.Tk; ++t) m[size_t(b * c.Tk + t)] = (t % (b + 3) == 2) ? 0 : 1;
  return m;
}

AttentionMask make_mask(const Case& c, Device dev) {
  AttentionMask m;
  m.causal = true;
  m.window = c.window;
  if (!c.docs.empty()) m.doc_pos = from_ints(doc_pos_values(c), {c.B, c.Tq}, DType::I32, dev);
  if (c.padded) m.key_padding = from_ints(padding_values(c), {c.B, c.Tk}, DType::U8, dev);
  return m;
}

struct Inputs {
  Vals q, k, v, g;
};
Inputs draw(const Case& c, uint64_t seed) {
  Generator gen(seed);
  auto r = [&](Shape s) { return randn(s, gen, 1.0f, DType::F64).to_double_vector(); };
  return {r({c.B, c.H, c.Tq, c.D}), r({c.B, c.Hkv, c.Tk, c.D}), r({c.B, c.Hkv, c.Tk, c.D}), r({c.B, c.H, c.Tq, c.D})};
}

struct Outcome {
  Vals out, dq, dk, dv;
};

// The rule straight from the definition, on the dense Tq x Tk grid.
bool visible(const Case& c, const std::vector<int64_t>& doc, const std::vector<int64_t>& pad, int64_t b, int64_t i,
             int64_t j) {
  const int64_t a = i + c.Tk - c.Tq;  // the query's aligned index
  if (j > a) return false;
  if (c.window > 0 && a - j >= c.window) return false;
  if (!doc.empty() && j < i - doc[size_t(b * c.Tq + i)]) return false;
  if (!pad.empty() && pad[size_t(b * c.Tk + j)] == 0) return false;
  return true;
}

// Naive dense attention and its gradients in f64 (a query that sees nothing gives zeros).
Outcome naive(const Case& c, const Inputs& in) {
  const std::vector<int64_t> doc = c.docs.empty() ? std::vector<int64_t>() : doc_pos_values(c);
  const std::vector<int64_t> pad = c.padded ? padding_values(c) : std::vector<int64_t>();
  const int64_t G = c.H / c.Hkv, D = c.D;
  const double sc = double(float(1.0 / std::sqrt(double(D))));  // the ops pass the scale as f32
  Outcome o{Vals(in.q.size()), Vals(in.q.size()), Vals(in.k.size()), Vals(in.v.size())};
  std::vector<double> p(size_t(c.Tk)), dp(size_t(c.Tk));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const size_t qb = size_t((b * c.H + h) * c.Tq * D), kb = size_t((b * c.Hkv + h / G) * c.Tk * D);
      for (int64_t i = 0; i < c.Tq; ++i) {
        const double* q = &in.q[qb + size_t(i * D)];
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Tk; ++j) {
          p[size_t(j)] = -INFINITY;
          if (!visible(c, doc, pad, b, i, j)) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q[d] * in.k[kb + size_t(j * D + d)];
          p[size_t(j)] = s * sc;
          mx = std::max(mx, p[size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // nothing visible: zeros everywhere
        double sum = 0;
        for (int64_t j = 0; j < c.Tk; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        const double* g = &in.g[qb + size_t(i * D)];
        double dot = 0;
        for (int64_t j = 0; j < c.Tk; ++j) {
          p[size_t(j)] /= sum;
          double x = 0;
          for (int64_t d = 0; d < D; ++d) {
            o.out[qb + size_t(i * D + d)] += p[size_t(j)] * in.v[kb + size_t(j * D + d)];
            x += g[d] * in.v[kb + size_t(j * D + d)];
          }
          dp[size_t(j)] = x;
          dot += p[size_t(j)] * x;
        }
        for (int64_t j = 0; j < c.Tk; ++j) {
          const double ds = p[size_t(j)] * (dp[size_t(j)] - dot) * sc;
          for (int64_t d = 0; d < D; ++d) {
            o.dv[kb + size_t(j * D + d)] += p[size_t(j)] * g[d];
            o.dq[qb + size_t(i * D + d)] += ds * in.k[kb + size_t(j * D + d)];
            o.dk[kb + size_t(j * D + d)] += ds * q[d];
          }
        }
      }
    }
  return o;
}

Outcome run_sdpa(const Case& c, const Inputs& in, DType dt, Device dev) {
  Tensor q = from_vector(in.q, {c.B, c.H, c.Tq, c.D}, dt, dev).set_requires_grad(true);
  Tensor k = from_vector(in.k, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor v = from_vector(in.v, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor y = scaled_dot_product_attention(q, k, v, make_mask(c, dev));
  y.backward(from_vector(in.g, y.shape(), dt, dev));
  return {y.to_double_vector(), q.grad().to_double_vector(), k.grad().to_double_vector(), v.grad().to_double_vector()};
}

// [B, H, T, D] values -> [B, T, H*D] (the packed layout of one part of qkv).
Vals to_btc(const Vals& x, int64_t B, int64_t H, int64_t T, int64_t D) {
  Vals out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) out[size_t(((b * T + t) * H + h) * D + d)] = x[size_t(((b * H + h) * T + t) * D + d)];
  return out;
}

// The packed ops on the same values: qkv [B, T, (H + 2 Hkv) D]; results back in [B, H, T, D].
// how: 0 = the GQA overload, 1 = the multi-head overload (H == Hkv), 2 = attention_linear with an
// identity weight (its output is the attention's).
Outcome run_packed(const Case& c, const Inputs& in, DType dt, Device dev, int how) {
  const int64_t B = c.B, T = c.Tq, D = c.D, H = c.H, Hkv = c.Hkv, W = (H + 2 * Hkv) * D;
  const Vals q = to_btc(in.q, B, H, T, D), k = to_btc(in.k, B, Hkv, T, D), v = to_btc(in.v, B, Hkv, T, D);
  Vals qkv(size_t(B * T * W));
  for (int64_t r = 0; r < B * T; ++r) {
    std::copy_n(&q[size_t(r * H * D)], H * D, &qkv[size_t(r * W)]);
    std::copy_n(&k[size_t(r * Hkv * D)], Hkv * D, &qkv[size_t(r * W + H * D)]);
    std::copy_n(&v[size_t(r * Hkv * D)], Hkv * D, &qkv[size_t(r * W + (H + Hkv) * D)]);
  }
  Tensor x = from_vector(qkv, {B, T, W}, dt, dev).set_requires_grad(true);
  const AttentionMask m = make_mask(c, dev);
  Tensor y;
  if (how == 0) y = self_attention_packed(x, H, Hkv, m);
  if (how == 1) y = self_attention_packed(x, H, H, m);
  if (how == 2) {
    Vals eye(size_t(H * D * H * D));
    for (int64_t i = 0; i < H * D; ++i) eye[size_t(i * H * D + i)] = 1;
    y = attention_linear(x, H, Hkv, m, from_vector(eye, {H * D, H * D}, dt, dev), Tensor());
    y = reshape(y, {B, T, H * D});
  }
  y.backward(from_vector(to_btc(in.g, B, H, T, D), {B, T, H * D}, dt, dev));
  // back to [B, H, T, D] per part
  const Vals yo = y.to_double_vector(), gx = x.grad().to_double_vector();
  Outcome o{Vals(in.q.size()), Vals(in.q.size()), Vals(in.k.size()), Vals(in.v.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t r = b * T + t;
        for (int64_t h = 0; h < H; ++h) {
          o.out[size_t(((b * H + h) * T + t) * D + d)] = yo[size_t(r * H * D + h * D + d)];
          o.dq[size_t(((b * H + h) * T + t) * D + d)] = gx[size_t(r * W + h * D + d)];
        }
        for (int64_t h = 0; h < Hkv; ++h) {
          o.dk[size_t(((b * Hkv + h) * T + t) * D + d)] = gx[size_t(r * W + (H + h) * D + d)];
          o.dv[size_t(((b * Hkv + h) * T + t) * D + d)] = gx[size_t(r * W + (H + Hkv + h) * D + d)];
        }
      }
  return o;
}

double rel(const Vals& a, const Vals& ref) { return test::rel_error(a, ref, 1e-6); }

// dq and dk are measured against the gradients' scale (dv's norm) as well as their own: with a
// window of 1 each query sees one key, its softmax is 1 whatever the scores, and the exact dq and
// dk are zero, so a low-precision kernel's rounding (1e-7 relative in f32) is all there is to
// compare, and relative to zero it is unbounded (the first H100 run: 50 "relative" for a norm of
// 5e-5 over 102,400 values).
void expect_close(const Outcome& got, const Outcome& want, double tol) {
  const double scale = std::max(1e-6, std::sqrt(std::inner_product(want.dv.begin(), want.dv.end(), want.dv.begin(), 0.0)));
  EXPECT_LE(rel(got.out, want.out), tol) << "output";
  EXPECT_LE(test::rel_error(got.dq, want.dq, scale), tol) << "dq";
  EXPECT_LE(test::rel_error(got.dk, want.dk, scale), tol) << "dk";
  EXPECT_LE(rel(got.dv, want.dv), tol) << "dv";
}

double tolerance(DType dt) { return dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 1e-2; }

// Odd T, GQA, window 1, windows across the 64-row blocks, window >= T, documents of length 1,
// window + documents, key padding on top, Tq != Tk both ways (aligned windows).
const std::vector<Case>& cpu_cases() {
  static const std::vector<Case> cs = {
      {2, 4, 2, 37, 37, 8, 1, {}},
      {2, 4, 2, 37, 37, 8, 5, {}},
      {1, 2, 1, 150, 150, 4, 70, {}},
      {2, 4, 4, 37, 37, 8, 37, {}},
      {2, 4, 2, 37, 37, 8, 100, {}},
      {2, 4, 2, 37, 37, 8, 0, {1, 5, 1, 1, 12, 17}},
      {2, 6, 3, 37, 37, 8, 4, {1, 5, 1, 1, 12, 17}},
      {1, 2, 2, 150, 150, 4, 0, {90, 1, 59}},
      {2, 4, 2, 37, 37, 8, 6, {20, 17}, true},
      {2, 4, 2, 13, 20, 8, 4, {}},
      {2, 4, 1, 20, 13, 8, 3, {}, true},
  };
  return cs;
}

TEST(AttentionWindow, CpuMatchesNaiveDenseReference) {
  uint64_t seed = 1;
  for (const Case& c : cpu_cases()) {
    const Inputs in = draw(c, ++seed);
    const Outcome want = naive(c, in);
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      expect_close(run_sdpa(c, in, dt, Device::cpu()), want, tolerance(dt));
      if (c.Tq != c.Tk) continue;
      for (int how : {0, 1, 2}) {
        if (how == 1 && c.H != c.Hkv) continue;
        SCOPED_TRACE("packed path " + std::to_string(how));
        expect_close(run_packed(c, in, dt, Device::cpu(), how), want, tolerance(dt));
      }
    }
  }
}

// A test that can fail: the naive reference tells a window from plain causal, and documents from none.
TEST(AttentionWindow, ReferenceTellsMasksApart) {
  Case c{1, 2, 1, 37, 37, 8, 5, {}};
  const Inputs in = draw(c, 3);
  Case causal = c;
  causal.window = 0;
  EXPECT_GT(rel(run_sdpa(causal, in, DType::F64, Device::cpu()).out, naive(c, in).out), 1e-3);
  Case docs = causal;
  docs.docs = {10, 27};
  EXPECT_GT(rel(run_sdpa(causal, in, DType::F64, Device::cpu()).out, naive(docs, in).out), 1e-3);
}

// window >= T is plain causal, bit for bit; so is one document spanning the row.
TEST(AttentionWindow, WideWindowAndOneDocumentEqualCausal) {
  for (int64_t w : {int64_t(37), int64_t(38), int64_t(1000)}) {
    Case c{2, 4, 2, 37, 37, 8, w, {}};
    const Inputs in = draw(c, 5);
    Case causal = c;
    causal.window = 0;
    const Outcome a = run_sdpa(c, in, DType::F32, Device::cpu()), b = run_sdpa(causal, in, DType::F32, Device::cpu());
    EXPECT_EQ(a.out, b.out) << w;
    EXPECT_EQ(a.dk, b.dk) << w;
  }
  Case c{2, 4, 2, 37, 37, 8, 0, {37}};
  Case causal = c;
  causal.docs.clear();
  const Inputs in = draw(c, 6);
  EXPECT_LE(rel(run_sdpa(c, in, DType::F64, Device::cpu()).dq, run_sdpa(causal, in, DType::F64, Device::cpu()).dq),
            1e-12);
}

// No new saved tensors: a windowed, packed-document forward allocates exactly what a causal one does.
TEST(AttentionWindow, AllocatesWhatCausalAllocates) {
  constexpr int64_t B = 2, T = 64, H = 4, Hkv = 2, D = 16;
  Allocator& a = allocator_for(Device::cpu());
  Generator gen(8);
  auto grown = [&](const AttentionMask& m) {
    Tensor qkv = randn({B, T, (H + 2 * Hkv) * D}, gen).set_requires_grad(true);
    const int64_t before = a.stats().allocated_bytes.current;
    a.reset_peak_stats();
    Tensor y = self_attention_packed(qkv, H, Hkv, m);
    return std::pair<int64_t, int64_t>{a.stats().allocated_bytes.current - before,
                                       a.stats().allocated_bytes.peak - before};
  };
  AttentionMask causal;
  causal.causal = true;
  AttentionMask both = causal;
  both.window = 9;
  Case c{B, H, Hkv, T, T, D, 9, {20, 1, 43}};
  both.doc_pos = make_mask(c, Device::cpu()).doc_pos;
  EXPECT_EQ(grown(both), grown(causal));
}

using lt::test::error_of;

TEST(AttentionWindow, BadMasksGiveOneLineErrors) {
  Generator gen(2);
  Tensor q = randn({2, 2, 6, 4}, gen), kv = randn({2, 1, 6, 4}, gen), qkv = randn({2, 6, 4 * 4}, gen);
  Tensor w = randn({8, 8}, gen);
  auto m = [](bool causal, int64_t window, Tensor doc) {
    AttentionMask x;
    x.causal = causal;
    x.window = window;
    x.doc_pos = std::move(doc);
    return x;
  };
  Tensor good = from_ints({0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, 5}, {2, 6}, DType::I32);
  struct Bad {
    AttentionMask mask;
    const char* says;
  };
  const std::vector<Bad> bads = {
      {m(true, -1, Tensor()), "window -1 is negative"},
      {m(false, 4, Tensor()), "window 4 without causal"},
      {m(false, 0, good), "doc_pos without causal"},
      {m(true, 0, from_ints({0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, 5}, {2, 6}, DType::I64)), "doc_pos is i64 [2, 6]"},
      {m(true, 0, from_ints({0, 1, 2, 0, 0, 1}, {1, 6}, DType::I32)), "doc_pos is i32 [1, 6]"},
      {m(true, 0, from_ints({0, 1, 3, 0, 0, 1, 0, 1, 2, 3, 4, 5}, {2, 6}, DType::I32)),
       "doc_pos[0, 2] = 3 is neither 0 (a document start) nor 2"},
      {m(true, 0, from_ints({0, 1, 2, 0, 0, 1, 1, 2, 3, 4, 5, 6}, {2, 6}, DType::I32)), "doc_pos[1, 0] = 1"},
      {m(true, 0, from_ints({0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, -1}, {2, 6}, DType::I32)), "doc_pos[1, 5] = -1"},
      {m(true, 0, Tensor::empty({2, 6}, DType::I32, Device::meta())), "device"},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.says);
    for (int path = 0; path < 3; ++path) {
      const std::string e = error_of([&] {
        if (path == 0) scaled_dot_product_attention(q, kv, kv, b.mask);
        if (path == 1) self_attention_packed(qkv, 2, 1, b.mask);
        if (path == 2) attention_linear(qkv, 2, 1, b.mask, w, Tensor());
      });
      EXPECT_NE(e.find(b.says), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
  }
  // doc_pos is self-attention only.
  const std::string e = error_of([&] { scaled_dot_product_attention(q, randn({2, 1, 7, 4}, gen), randn({2, 1, 7, 4}, gen), m(true, 0, good)); });
  EXPECT_NE(e.find("doc_pos with 6 queries and 7 keys"), std::string::npos) << e;
}

// ---- CUDA (skipped without a GPU): the same masks against the CPU reference in f64

// D = 64/128/256 in bf16 take the tensor-core kernels, f32 with D = 64/128 the register-tiled ones,
// D = 80 the SIMT path. Windows and documents across and inside the 64-row tiles, Tq != Tk.
const std::vector<Case>& cuda_cases() {
  static const std::vector<Case> cs = {
      {2, 4, 2, 200, 200, 64, 1, {}},
      {2, 4, 2, 200, 200, 64, 37, {}},
      {1, 4, 1, 300, 300, 128, 64, {}},
      {2, 4, 2, 200, 200, 64, 0, {1, 70, 1, 63, 65}},
      {2, 4, 4, 200, 200, 128, 40, {130, 1, 69}, true},
      {2, 4, 2, 130, 200, 64, 50, {}},
      {2, 4, 2, 200, 130, 64, 50, {}},
      {2, 6, 3, 150, 150, 80, 33, {100, 50}},
      {1, 2, 1, 260, 260, 64, 129, {}, true},
      // D = 256 (Gemma 3's sliding layers): the tensor-core kernels too
      {1, 4, 2, 200, 200, 256, 37, {}},
      {2, 2, 1, 150, 150, 256, 0, {100, 50}},
  };
  return cs;
}

TEST(AttentionWindow, CudaMatchesCpuReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  uint64_t seed = 100;
  for (const Case& c : cuda_cases())
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      Inputs in = draw(c, ++seed);
      for (Vals* x : {&in.q, &in.k, &in.v, &in.g}) *x = from_vector(*x, {int64_t(x->size())}, dt).to_double_vector();
      const Outcome ref = run_sdpa(c, in, DType::F64, Device::cpu());
      expect_close(run_sdpa(c, in, dt, Device::cuda()), ref, tolerance(dt));
      if (c.Tq == c.Tk) expect_close(run_packed(c, in, dt, Device::cuda(), 0), ref, tolerance(dt));
    }
}

// The timing check (GPU only; prints, and checks the window skips tiles): bf16, B 1, H 8, Hkv 2,
// T 8192, D 128, forward + backward through the backend ops: causal, window 512, and 16 packed
// documents of 512. With tile skipping both masked runs cost about (512 + 64) / 4096 of causal's
// tiles; the check asks for under half.
TEST(AttentionWindow, CudaTimeWindowVsCausalT8192) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device gpu = Device::cuda();
  const int64_t B = 1, H = 8, Hkv = 2, T = 8192, D = 128;
  Generator gen(11);
  auto rnd = [&](Shape sh) { return randn(sh, gen, 1.0f, DType::BF16, gpu); };
  Tensor q = rnd({B, H, T, D}), k = rnd({B, Hkv, T, D}), v = rnd({B, Hkv, T, D}), dout = rnd({B, H, T, D});
  Tensor out = Tensor::empty(q.shape(), DType::BF16, gpu), lse = Tensor::empty({B, H, T}, DType::F32, gpu);
  Tensor dq = Tensor::empty(q.shape(), DType::BF16, gpu), dk = Tensor::empty(k.shape(), DType::BF16, gpu),
         dv = Tensor::empty(v.shape(), DType::BF16, gpu);
  std::vector<int64_t> dp;
  for (int64_t t = 0; t < T; ++t) dp.push_back(t % 512);
  const Tensor doc = from_ints(dp, {B, T}, DType::I32, gpu);
  Backend& be = backend_for(gpu);
  const float sc = 1.0f / std::sqrt(float(D));
  auto time_ms = [&](const std::function<void()>& f) {
    f();
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) f();
    be.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
  };
  struct Run {
    const char* name;
    int64_t window;
    Tensor doc;
  };
  double ms[3][2];
  const Run runs[3] = {{"causal", 0, Tensor()}, {"window 512", 512, Tensor()}, {"16 docs of 512", 0, doc}};
  for (int i = 0; i < 3; ++i) {
    const Run& r = runs[i];
    ms[i][0] = time_ms([&] { be.attention_fwd(out, lse, q, k, v, Tensor(), true, r.window, r.doc, sc); });
    ms[i][1] = time_ms([&] { be.attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), true, r.window, r.doc, sc); });
    std::printf("time attention bf16 B1 H8 Hkv2 T8192 D128 %-15s fwd %.3f ms, bwd %.3f ms\n", r.name, ms[i][0],
                ms[i][1]);
  }
  for (int i = 1; i < 3; ++i) {
    EXPECT_LT(ms[i][0], 0.5 * ms[0][0]) << runs[i].name << " forward";
    EXPECT_LT(ms[i][1], 0.5 * ms[0][1]) << runs[i].name << " backward";
  }
}

}  // namespace
