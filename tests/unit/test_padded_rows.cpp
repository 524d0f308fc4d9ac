// Padded rows (ops/op_common.h): a wide linear of an odd width writes its output in rows of a
// 16-byte multiple, the GEMMs, cross-entropy and reshape read them in place, and the values and
// gradients are exactly those of the unpadded computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "ops/op_common.h"
#include "unit/rel_error.h"

using namespace lt;
using detail::padded_row_stride;
using detail::padded_rows;

namespace {

Tensor random(const Shape& s, DType dt, uint64_t seed, bool grad) {
  Generator gen(seed);
  Tensor t = randn(s, gen, 1.0f, dt);
  if (grad) t.set_requires_grad(true);
  return t;
}

std::vector<int64_t> targets_for(int64_t n, int64_t v) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % 5 == 3 ? -100 : (i * 7919) % v;
  return t;
}

}  // namespace

TEST(PaddedRows, StrideRulePadsOnlyWideOddWidths) {
  EXPECT_EQ(padded_row_stride(50257, DType::BF16), 50264);
  EXPECT_EQ(padded_row_stride(50257, DType::F16), 50264);
  EXPECT_EQ(padded_row_stride(50257, DType::F32), 50260);
  EXPECT_EQ(padded_row_stride(50257, DType::F64), 50258);
  EXPECT_EQ(padded_row_stride(50264, DType::BF16), 50264);  // already 16-byte rows
  EXPECT_EQ(padded_row_stride(10, DType::BF16), 10);        // a classifier's 10 classes: 60% more, not padded
  EXPECT_EQ(padded_row_stride(441, DType::BF16), 441);      // 7 more in 441 is over 1/64
  EXPECT_EQ(padded_row_stride(449, DType::BF16), 456);      // 7 more in 449 is under 1/64
  EXPECT_EQ(padded_row_stride(1001, DType::F32), 1004);
}

TEST(PaddedRows, LinearWritesPaddedRowsAndReshapeKeepsThem) {
  const int64_t V = 1001, ld = 1008;
  Tensor x = random({2, 3, 16}, DType::BF16, 1, false);
  Tensor w = random({V, 16}, DType::BF16, 2, false);
  Tensor y = linear(x, w, Tensor());
  EXPECT_EQ(y.shape(), Shape({2, 3, V}));
  EXPECT_EQ(y.strides(), Shape({3 * ld, ld, 1}));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_EQ(y.storage()->nbytes(), 2 * 3 * ld * 2);  // the padding is allocated on every backend
  EXPECT_EQ(padded_rows(y), ld);
  Tensor r = reshape(y, {-1, V});  // same last size: a view in the same rows
  EXPECT_EQ(r.strides(), Shape({ld, 1}));
  EXPECT_EQ(r.storage(), y.storage());
  Tensor other = reshape(y, {6 * V});  // another last size: a contiguous copy
  EXPECT_TRUE(other.is_contiguous());
  EXPECT_NE(other.storage(), y.storage());
  EXPECT_EQ(y.to_float_vector(), other.to_float_vector());
  // A slice's rows are not padded rows: they stay a strided view that others copy.
  EXPECT_EQ(padded_rows(slice(y, 2, 0, 1000)), 0);
  EXPECT_EQ(padded_rows(y.contiguous()), V);
}

// The padded head (linear) against the same head computed by matmul, whose output is packed:
// the same sums in the same order, so the loss and every gradient agree bit for bit.
TEST(PaddedRows, TiedHeadLossAndGradientsEqualThePackedComputation) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t N = 12, C = 24, V = 1001;
    Tensor tg = from_ints(targets_for(N, V), {N}, DType::I64);
    Tensor x1 = random({N, C}, dt, 3, true), w1 = random({V, C}, dt, 4, true);
    Tensor x2 = random({N, C}, dt, 3, true), w2 = random({V, C}, dt, 4, true);
    Tensor padded = linear(x1, w1, Tensor());
    Tensor packed = matmul(x2, w2, false, true);
    ASSERT_FALSE(padded.is_contiguous());
    ASSERT_TRUE(packed.is_contiguous());
    Tensor l1 = cross_entropy(padded, tg), l2 = cross_entropy(packed, tg);
    l1.backward();
    l2.backward();
    EXPECT_EQ(l1.item(), l2.item());
    EXPECT_EQ(x1.grad().to_float_vector(), x2.grad().to_float_vector());
    EXPECT_EQ(w1.grad().to_float_vector(), w2.grad().to_float_vector());
  }
}

// Cross-entropy allocates its dlogits in the padded rows of the width, whatever the logits' layout.
TEST(PaddedRows, CrossEntropyGradientIsPadded) {
  const int64_t N = 4, V = 1001;
  Tensor logits = random({N, V}, DType::BF16, 5, true);  // a contiguous leaf
  Tensor tg = from_ints(targets_for(N, V), {N}, DType::I64);
  Tensor loss = cross_entropy(logits, tg, -100, Reduction::Sum);
  Allocator& a = allocator_for(Device::cpu());
  a.clear_history();
  a.set_history(true);
  loss.backward();
  a.set_history(false);
  bool found = false;
  for (const MemoryEvent& e : a.history())
    found = found || (e.action == MemoryEvent::Action::Alloc && e.requested == N * 1008 * 2);
  a.clear_history();
  EXPECT_TRUE(found) << "no allocation of the padded [4, 1008] bf16 dlogits";
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().shape(), Shape({N, V}));
}

namespace {

using test::rel_error;

struct HeadRun {
  std::vector<float> loss, dx, dw;
  std::vector<MemoryEvent> trace;
};

// GPT-2's tied head on `dev`: loss = CE(reshape(x @ wte^T, [B*T, V]), targets), then backward.
HeadRun gpt2_head(Device dev, DType dt) {
  const int64_t B = 2, T = 32, C = 64, V = 50257;
  Tensor x = scale(random({B, T, C}, dt, 11, false), 0.125).to(dev);  // logits ~N(0, 1)
  Tensor w = random({V, C}, dt, 12, false).to(dev);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor tg = from_ints(targets_for(B * T, V), {B * T}, DType::I64, dev);
  Allocator& a = allocator_for(dev);
  a.clear_history();
  a.set_history(true);
  Tensor loss = cross_entropy(reshape(linear(x, w, Tensor()), {-1, V}), tg);
  loss.backward();
  a.set_history(false);
  HeadRun r;
  r.trace = a.history();
  a.clear_history();
  if (dev.is_meta()) return r;
  r.loss = loss.to_float_vector();
  r.dx = x.grad().to_float_vector();
  r.dw = w.grad().to_float_vector();
  return r;
}

}  // namespace

TEST(PaddedRows, Gpt2HeadTraceOnMetaEqualsCpu) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    HeadRun cpu = gpt2_head(Device::cpu(), dt), meta = gpt2_head(Device::meta(), dt);
    ASSERT_EQ(cpu.trace.size(), meta.trace.size());
    bool padded = false;
    for (size_t i = 0; i < cpu.trace.size(); ++i) {
      EXPECT_EQ(cpu.trace[i].action, meta.trace[i].action) << i;
      EXPECT_EQ(cpu.trace[i].requested, meta.trace[i].requested) << i;
      padded = padded || cpu.trace[i].requested == 2 * 32 * padded_row_stride(50257, dt) * int64_t(dtype_size(dt));
    }
    EXPECT_TRUE(padded) << "no allocation of padded logits";
  }
}

// The GPU's padded GEMMs (ldc in forward; lda and the transposed a in backward) and its
// cross-entropy over rows 50264 (bf16) / 50260 (f32) apart, against the CPU.
TEST(PaddedRows, Gpt2HeadOnCudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::F32 ? 1e-4 : 2e-2;
    HeadRun cpu = gpt2_head(Device::cpu(), dt), gpu = gpt2_head(Device::cuda(), dt);
    EXPECT_LE(rel_error(gpu.loss, cpu.loss), tol);
    EXPECT_LE(rel_error(gpu.dx, cpu.dx), tol);
    EXPECT_LE(rel_error(gpu.dw, cpu.dw), tol);
  }
}
