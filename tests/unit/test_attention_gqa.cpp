// Grouped-query attention: k, v with Hkv heads serve H = G * Hkv query heads (query head h reads
// kv head h / G, Hugging Face's repeat_kv order), in scaled_dot_product_attention and in the
// packed self_attention_packed(qkv, heads, kv_heads, ...). Checked against a reference that
// repeats K/V explicitly (so its dK/dV is the autograd sum over each group), forward and
// backward, in f64 and f32 on the CPU and, where a GPU answers, on CUDA against the CPU in f64
// (tensor-core D = 64/128, register-tiled f32, SIMT); gradcheck in f64; bit-identical repeat
// backwards; no repeated K/V allocated or saved; one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "unit/gradcheck.h"
#include "unit/error_of.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

using V = std::vector<Tensor>;
using Vals = std::vector<double>;

struct Case {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal, masked;
  double scale = 0.0;
};

std::string case_str(const Case& c) {
  return "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + " Tq " +
         std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " D " + std::to_string(c.D) +
         (c.causal ? " causal" : "") + (c.masked ? " padded" : "");
}

// Batch b masks every (b + 2)-th key and the last one; with 3+ batches the last sees nothing.
Tensor make_mask(int64_t B, int64_t T, Device dev) {
  std::vector<int64_t> m(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      m[size_t(b * T + t)] = (B >= 3 && b == B - 1) ? 0 : (t % (b + 2) == 1 || t == T - 1) ? 0 : 1;
  return from_ints(m, {B, T}, DType::U8, dev);
}

// x [B, Hkv, T, D] -> [B, Hkv * G, T, D] with kv head j copied to heads j*G .. j*G + G - 1.
Tensor repeat_kv(const Tensor& x, int64_t G) {
  const int64_t B = x.size(0), Hkv = x.size(1), T = x.size(2), D = x.size(3);
  return reshape(contiguous(expand(reshape(x, {B, Hkv, 1, T, D}), {B, Hkv, G, T, D})), {B, Hkv * G, T, D});
}

// The values of one case's inputs (q, k, v, upstream gradient), drawn once in f64.
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

// Forward and backward of scaled_dot_product_attention in dtype dt on dev; reference: K/V
// repeated to H heads first (their gradients flow back through the repeat's sum).
Outcome run_sdpa(const Case& c, const Inputs& in, DType dt, Device dev, bool reference) {
  Tensor q = from_vector(in.q, {c.B, c.H, c.Tq, c.D}, dt, dev).set_requires_grad(true);
  Tensor k = from_vector(in.k, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor v = from_vector(in.v, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor mask = c.masked ? make_mask(c.B, c.Tk, dev) : Tensor();
  const int64_t G = c.H / c.Hkv;
  Tensor y = reference ? scaled_dot_product_attention(q, repeat_kv(k, G), repeat_kv(v, G), c.causal, mask, c.scale)
                       : scaled_dot_product_attention(q, k, v, c.causal, mask, c.scale);
  EXPECT_EQ(y.shape(), Shape({c.B, c.H, c.Tq, c.D}));
  y.backward(from_vector(in.g, y.shape(), dt, dev));
  EXPECT_EQ(k.grad().shape(), k.shape());
  EXPECT_EQ(v.grad().shape(), v.shape());
  return {y.to_double_vector(), q.grad().to_double_vector(), k.grad().to_double_vector(), v.grad().to_double_vector()};
}

// The packed layout [q (H*D) | k (Hkv*D) | v (Hkv*D)] along the last dim of qkv [B, T, W].
struct PackedInputs {
  Vals qkv, g;
};
PackedInputs draw_packed(const Case& c, uint64_t seed) {
  Generator gen(seed);
  const int64_t W = (c.H + 2 * c.Hkv) * c.D;
  return {randn({c.B, c.Tq, W}, gen, 1.0f, DType::F64).to_double_vector(),
          randn({c.B, c.Tq, c.H * c.D}, gen, 1.0f, DType::F64).to_double_vector()};
}

// The reference of the packed op: split by slices, heads by permute + contiguous, K/V repeated.
Tensor packed_reference(const Tensor& qkv, const Case& c, const Tensor& mask) {
  const int64_t B = c.B, T = c.Tq, D = c.D, C = c.H * D, Ckv = c.Hkv * D;
  auto heads = [&](int64_t from, int64_t n) {
    return contiguous(permute(reshape(slice(qkv, 2, from, from + n * D), {B, T, n, D}), {0, 2, 1, 3}));
  };
  const int64_t G = c.H / c.Hkv;
  Tensor o = scaled_dot_product_attention(heads(0, c.H), repeat_kv(heads(C, c.Hkv), G),
                                          repeat_kv(heads(C + Ckv, c.Hkv), G), c.causal, mask, c.scale);
  return reshape(contiguous(transpose(o, 1, 2)), {B, T, C});
}

struct PackedOutcome {
  Vals out, dqkv;
};
PackedOutcome run_packed(const Case& c, const PackedInputs& in, DType dt, Device dev, bool reference) {
  const int64_t W = (c.H + 2 * c.Hkv) * c.D;
  Tensor qkv = from_vector(in.qkv, {c.B, c.Tq, W}, dt, dev).set_requires_grad(true);
  Tensor mask = c.masked ? make_mask(c.B, c.Tq, dev) : Tensor();
  Tensor y = reference ? packed_reference(qkv, c, mask)
                       : self_attention_packed(qkv, c.H, c.Hkv, c.causal, mask, c.scale);
  EXPECT_EQ(y.shape(), Shape({c.B, c.Tq, c.H * c.D}));
  EXPECT_TRUE(y.is_contiguous());
  y.backward(from_vector(in.g, y.shape(), dt, dev));
  EXPECT_EQ(qkv.grad().shape(), qkv.shape());
  return {y.to_double_vector(), qkv.grad().to_double_vector()};
}

double rel_error(const Vals& a, const Vals& ref) { return test::rel_error(a, ref, 1e-6); }

// Equal values (== on doubles); reports the first difference.
::testing::AssertionResult same(const Vals& a, const Vals& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

double tolerance(DType dt) {
  return dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 5e-3 : 1e-2;
}

void expect_close(const Outcome& got, const Outcome& want, double tol) {
  EXPECT_LE(rel_error(got.out, want.out), tol) << "output";
  EXPECT_LE(rel_error(got.dq, want.dq), tol) << "dq";
  EXPECT_LE(rel_error(got.dk, want.dk), tol) << "dk";
  EXPECT_LE(rel_error(got.dv, want.dv), tol) << "dv";
}

// G in {1, 2, 4}; causal and not; key padding (the last batch of three sees nothing); Tq != Tk
// both ways; odd lengths (77).
const std::vector<Case>& cpu_cases() {
  static const std::vector<Case> cs = {
      {2, 4, 2, 7, 7, 8, false, false},  {2, 4, 1, 77, 77, 16, true, false}, {3, 4, 2, 77, 77, 8, true, true},
      {3, 4, 4, 9, 9, 8, false, true},   {2, 8, 2, 5, 13, 8, true, false},   {1, 4, 2, 13, 6, 8, true, true},
      {2, 6, 3, 33, 20, 4, false, true, 0.3}, {3, 8, 2, 77, 77, 4, false, true},
  };
  return cs;
}

TEST(AttentionGqa, MatchesRepeatedKvOnCpu) {
  uint64_t seed = 10;
  for (const Case& c : cpu_cases())
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const Inputs in = draw(c, ++seed);
      const Outcome want = run_sdpa(c, in, dt, Device::cpu(), true);
      const Outcome got = run_sdpa(c, in, dt, Device::cpu(), false);
      expect_close(got, want, tolerance(dt));
      if (c.H == c.Hkv) {  // G = 1: the very same computation
        EXPECT_TRUE(same(got.out, want.out));
        EXPECT_TRUE(same(got.dk, want.dk));
      }
    }
}

// The reference check above must be able to fail: kv head j serving query heads j, j + Hkv, ...
// (the other plausible order) gives a different result.
TEST(AttentionGqa, ReferenceTellsTheGroupingOrderApart) {
  const Case c{1, 4, 2, 6, 6, 8, false, false};
  const Inputs in = draw(c, 3);
  const Outcome got = run_sdpa(c, in, DType::F64, Device::cpu(), false);
  Tensor q = from_vector(in.q, {1, 4, 6, 8}), k = from_vector(in.k, {1, 2, 6, 8}), v = from_vector(in.v, {1, 2, 6, 8});
  Tensor y = scaled_dot_product_attention(q, concat({k, k}, 1), concat({v, v}, 1), false);  // tiled, not repeated
  EXPECT_GT(rel_error(got.out, y.to_double_vector()), 1e-3);
}

TEST(AttentionGqa, PackedMatchesRepeatedKvOnCpu) {
  uint64_t seed = 40;
  for (const Case& c0 : cpu_cases()) {
    Case c = c0;
    c.Tk = c.Tq;  // self-attention
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const PackedInputs in = draw_packed(c, ++seed);
      const PackedOutcome want = run_packed(c, in, dt, Device::cpu(), true);
      const PackedOutcome got = run_packed(c, in, dt, Device::cpu(), false);
      EXPECT_LE(rel_error(got.out, want.out), tolerance(dt)) << "output";
      EXPECT_LE(rel_error(got.dqkv, want.dqkv), tolerance(dt)) << "dqkv";
    }
  }
}

// With kv_heads == heads the GQA signature is the multi-head op, bit for bit.
TEST(AttentionGqa, PackedWithEqualHeadsIsTheMultiHeadOp) {
  Generator gen(5);
  Tensor x = randn({2, 9, 3 * 2 * 8}, gen);
  Tensor mask = make_mask(2, 9, Device::cpu());
  EXPECT_TRUE(same(self_attention_packed(x, 2, 2, true, mask, 0.3).to_double_vector(),
                   self_attention_packed(x, 2, true, mask, 0.3).to_double_vector()));
}

// self_attention_packed(qkv, heads, kv_heads) without causal does not compile (it would
// otherwise call the multi-head overload with causal = kv_heads != 0); with a bool it does.
template <class K> constexpr bool packed_accepts_third(K) {
  return requires(const Tensor& t, K k) { self_attention_packed(t, int64_t(4), k); };
}
static_assert(packed_accepts_third(true));
static_assert(!packed_accepts_third(2));
static_assert(!packed_accepts_third(int64_t(2)));

TEST(AttentionGqa, Gradcheck) {
  using test::gradcheck;
  using test::rand64;
  Tensor mask = from_ints({1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 6}, DType::U8);
  for (bool causal : {false, true}) {
    EXPECT_TRUE(gradcheck([=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
                          {rand64({2, 4, 5, 3}, 61), rand64({2, 2, 5, 3}, 62), rand64({2, 2, 5, 3}, 63)}))
        << "G 2 causal " << causal;
    EXPECT_TRUE(gradcheck([&](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal, mask, 0.4); },
                          {rand64({2, 4, 6, 3}, 64), rand64({2, 1, 6, 3}, 65), rand64({2, 1, 6, 3}, 66)}))
        << "G 4 padded causal " << causal;
    EXPECT_TRUE(gradcheck([=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
                          {rand64({1, 4, 3, 4}, 67), rand64({1, 2, 7, 4}, 68), rand64({1, 2, 7, 4}, 69)}))
        << "G 2 Tq < Tk causal " << causal;
    EXPECT_TRUE(gradcheck([=](const V& x) { return self_attention_packed(x[0], 4, 2, causal); },
                          {rand64({2, 5, (4 + 2 * 2) * 3}, 70)}))
        << "packed G 2 causal " << causal;
    EXPECT_TRUE(gradcheck([&](const V& x) { return self_attention_packed(x[0], 3, 1, causal, mask); },
                          {rand64({2, 6, (3 + 2) * 2}, 71)}))
        << "packed G 3 padded causal " << causal;
  }
}

TEST(AttentionGqa, BackwardIsBitIdenticalRunToRunOnCpu) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Case c{2, 8, 2, 77, 77, 16, true, true};
    const Inputs in = draw(c, 90);
    const Outcome a = run_sdpa(c, in, dt, Device::cpu(), false), b = run_sdpa(c, in, dt, Device::cpu(), false);
    EXPECT_TRUE(same(a.dk, b.dk)) << dtype_name(dt);
    EXPECT_TRUE(same(a.dv, b.dv)) << dtype_name(dt);
    EXPECT_TRUE(same(a.dq, b.dq)) << dtype_name(dt);
  }
}

// Bytes that stay allocated after the forward (what the graph saves plus the output) and the
// forward's peak, relative to before: out and lse only, so neither K/V repeated to H heads
// nor any other copy of them is made or saved (the saved K/V are the inputs, at Hkv heads).
TEST(AttentionGqa, ForwardAllocatesOnlyOutAndLse) {
  constexpr int64_t B = 2, T = 64, H = 4, Hkv = 2, D = 16;  // every tensor a whole number of 512-byte blocks
  Allocator& a = allocator_for(Device::cpu());
  Generator gen(8);
  const int64_t out_bytes = B * T * H * D * 4, lse_bytes = B * H * T * 4;
  {
    Tensor qkv = randn({B, T, (H + 2 * Hkv) * D}, gen).set_requires_grad(true);
    const int64_t before = a.stats().allocated_bytes.current;
    a.reset_peak_stats();
    Tensor y = self_attention_packed(qkv, H, Hkv, true);
    EXPECT_EQ(a.stats().allocated_bytes.current - before, out_bytes + lse_bytes) << "packed";
    EXPECT_EQ(a.stats().allocated_bytes.peak - before, out_bytes + lse_bytes) << "packed";
    y.backward(randn(y.shape(), gen));
    EXPECT_EQ(qkv.grad().shape(), qkv.shape());
  }
  {
    Tensor q = randn({B, H, T, D}, gen).set_requires_grad(true);
    Tensor k = randn({B, Hkv, T, D}, gen).set_requires_grad(true), v = randn({B, Hkv, T, D}, gen).set_requires_grad(true);
    const int64_t before = a.stats().allocated_bytes.current;
    a.reset_peak_stats();
    Tensor y = scaled_dot_product_attention(q, k, v, true);
    EXPECT_EQ(a.stats().allocated_bytes.current - before, out_bytes + lse_bytes) << "sdpa";
    EXPECT_EQ(a.stats().allocated_bytes.peak - before, out_bytes + lse_bytes) << "sdpa";
  }
}

using lt::test::error_of;

TEST(AttentionGqa, HeadCountsThatDoNotDivideGiveOneLineErrors) {
  Generator gen(2);
  Tensor q = randn({1, 3, 4, 8}, gen), kv = randn({1, 2, 4, 8}, gen);
  const std::string e1 = error_of([&] { scaled_dot_product_attention(q, kv, kv, false); });
  EXPECT_NE(e1.find("q's 3 heads are not a multiple of k/v's 2 heads"), std::string::npos) << e1;
  const std::string e2 = error_of([&] { scaled_dot_product_attention(q, kv, randn({1, 1, 4, 8}, gen), false); });
  EXPECT_NE(e2.find("shapes do not fit"), std::string::npos) << e2;
  Tensor qkv = randn({1, 4, (4 + 2 * 3) * 8}, gen);
  const std::string e3 = error_of([&] { self_attention_packed(qkv, 4, 3, false); });
  EXPECT_NE(e3.find("4 query heads are not a multiple of 3 kv heads"), std::string::npos) << e3;
  const std::string e4 = error_of([&] { self_attention_packed(randn({1, 4, 50}, gen), 4, 2, false); });
  EXPECT_NE(e4.find("qkv's last dim 50"), std::string::npos) << e4;
  EXPECT_NE(e4.find("heads + 2 * kv_heads = 8"), std::string::npos) << e4;
  const std::string e5 = error_of([&] { self_attention_packed(qkv, 4, 0, false); });
  EXPECT_NE(e5.find("not a multiple of 0 kv heads"), std::string::npos) << e5;
  for (const std::string& e : {e1, e2, e3, e4, e5}) {
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// ---- CUDA (skipped without a GPU): the same comparisons against the CPU in f64

// D = 64/128/256 in 16-bit take the tensor-core kernels, f32 with D = 32/64/128 the register-tiled
// ones, D = 80 the SIMT fallback; T around and past the 64-row tiles, G in {1, 2, 4}.
const std::vector<Case>& cuda_cases() {
  static const std::vector<Case> cs = {
      {2, 4, 2, 77, 77, 64, true, false},  {3, 8, 2, 130, 130, 64, false, true}, {2, 4, 1, 65, 197, 64, true, false},
      {1, 4, 4, 96, 96, 64, true, true},   {2, 4, 2, 77, 77, 128, true, true},   {1, 8, 2, 130, 130, 128, false, false},
      {2, 4, 1, 130, 63, 128, true, false}, {2, 6, 3, 77, 77, 32, true, true},   {2, 4, 2, 40, 40, 80, true, true},
      // D = 256 (Gemma 3, Qwen3.5): Q from shared memory, dK/dV in two column halves
      {2, 4, 2, 77, 77, 256, true, true},   {1, 8, 2, 130, 130, 256, false, false}, {1, 4, 1, 65, 197, 256, true, false},
  };
  return cs;
}

TEST(AttentionGqa, CudaMatchesCpuReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  uint64_t seed = 200;
  for (const Case& c : cuda_cases())
    for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      Inputs in = draw(c, ++seed);
      for (Vals* x : {&in.q, &in.k, &in.v, &in.g})  // both sides see the values the dtype stores
        *x = from_vector(*x, {int64_t(x->size())}, dt).to_double_vector();
      const Outcome ref = run_sdpa(c, in, DType::F64, Device::cpu(), false);
      const Outcome got = run_sdpa(c, in, dt, Device::cuda(), false);
      expect_close(got, ref, tolerance(dt));
    }
}

TEST(AttentionGqa, CudaPackedMatchesCpuReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  uint64_t seed = 300;
  for (Case c : cuda_cases()) {
    c.Tk = c.Tq;
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      PackedInputs in = draw_packed(c, ++seed);
      for (Vals* x : {&in.qkv, &in.g}) *x = from_vector(*x, {int64_t(x->size())}, dt).to_double_vector();
      const PackedOutcome ref = run_packed(c, in, DType::F64, Device::cpu(), false);
      const PackedOutcome got = run_packed(c, in, dt, Device::cuda(), false);
      EXPECT_LE(rel_error(got.out, ref.out), tolerance(dt)) << "output";
      EXPECT_LE(rel_error(got.dqkv, ref.dqkv), tolerance(dt)) << "dqkv";
    }
  }
}

// Once the cuBLASLt workspace is held (any CUDA matmul allocates it), the tensor-core backward
// keeps delta there: dQ runs first and works it out, then dK/dV read it. The cases above may run
// before any matmul (then delta sits in dq's rows), so they run again after one. Rows that see no
// key (causal with Tq > Tk, the padded batch) must still get a finite delta.
TEST(AttentionGqa, CudaMatchesCpuReferenceWithDeltaInWorkspace) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  Generator gen(9);
  (void)matmul(randn({8, 8}, gen, 1.0f, DType::BF16, Device::cuda()), randn({8, 8}, gen, 1.0f, DType::BF16, Device::cuda()));
  ASSERT_GT(cuda_memory_info(0).workspace_bytes, 0) << "a matmul did not leave the cuBLASLt workspace held";
  uint64_t seed = 500;
  for (const Case& c : cuda_cases())
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      Inputs in = draw(c, ++seed);
      for (Vals* x : {&in.q, &in.k, &in.v, &in.g}) *x = from_vector(*x, {int64_t(x->size())}, dt).to_double_vector();
      const Outcome ref = run_sdpa(c, in, DType::F64, Device::cpu(), false);
      const Outcome got = run_sdpa(c, in, dt, Device::cuda(), false);
      expect_close(got, ref, tolerance(dt));
      const Outcome again = run_sdpa(c, in, dt, Device::cuda(), false);
      EXPECT_TRUE(same(got.dq, again.dq)) << "dq";
      EXPECT_TRUE(same(got.dk, again.dk)) << "dk";
    }
}

// The dK/dV kernels loop over a group's query heads in registers: no atomics, every bit the
// same run to run, on every path.
TEST(AttentionGqa, CudaBackwardIsBitIdenticalRunToRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (const Case& c : {Case{2, 8, 2, 130, 130, 64, true, true}, Case{2, 8, 2, 130, 130, 128, false, true},
                        Case{2, 8, 1, 77, 77, 80, true, false}, Case{1, 8, 2, 130, 130, 256, true, true}})
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const Inputs in = draw(c, 400);
      const Outcome a = run_sdpa(c, in, dt, Device::cuda(), false), b = run_sdpa(c, in, dt, Device::cuda(), false);
      EXPECT_TRUE(same(a.out, b.out)) << "output";
      EXPECT_TRUE(same(a.dq, b.dq)) << "dq";
      EXPECT_TRUE(same(a.dk, b.dk)) << "dk";
      EXPECT_TRUE(same(a.dv, b.dv)) << "dv";
      const PackedInputs pin = draw_packed(c, 401);
      const PackedOutcome pa = run_packed(c, pin, dt, Device::cuda(), false);
      const PackedOutcome pb = run_packed(c, pin, dt, Device::cuda(), false);
      EXPECT_TRUE(same(pa.dqkv, pb.dqkv)) << "dqkv";
    }
}

}  // namespace
