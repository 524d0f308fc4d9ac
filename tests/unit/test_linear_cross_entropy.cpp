// linear_cross_entropy (the chunked head + loss) against cross_entropy(linear(...)): the same
// loss and gradients, for any chunking, and never a logits buffer of all the rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

constexpr int64_t kN = 13, kC = 16, kV = 1001;

struct Case {
  Tensor x, w, targets;
};

Case make_case(DType dt, bool w_grad = true, bool all_ignored = false) {
  Generator gen(11);
  Case c;
  c.x = randn({kN, kC}, gen, 1.0f, dt);
  c.w = randn({kV, kC}, gen, 0.5f, dt);
  c.x.set_requires_grad(true);
  c.w.set_requires_grad(w_grad);
  std::vector<int64_t> t(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) t[size_t(i)] = all_ignored || i % 5 == 2 ? -100 : (i * 97 + 3) % kV;
  c.targets = from_ints(t, {kN});
  return c;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_double_vector(), vb = b.to_double_vector();
  EXPECT_EQ(va.size(), vb.size());
  double scale = 0, diff = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    scale = std::max(scale, std::abs(vb[i]));
    diff = std::max(diff, std::abs(va[i] - vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// Loss and gradients of the chunked op and of the unchunked path, on the same inputs.
void expect_matches(DType dt, int64_t chunk, Reduction r, double loss_tol, double grad_tol, bool w_grad = true) {
  Case a = make_case(dt, w_grad), b = make_case(dt, w_grad);
  Tensor la = linear_cross_entropy(a.x, a.w, a.targets, -100, r, chunk);
  Tensor lb = cross_entropy(linear(b.x, b.w, Tensor()), b.targets, -100, r);
  EXPECT_EQ(la.dtype(), lb.dtype());
  EXPECT_NEAR(la.item(), lb.item(), loss_tol * std::abs(lb.item())) << "chunk " << chunk;
  la.backward();
  lb.backward();
  EXPECT_LE(max_rel_diff(a.x.grad(), b.x.grad()), grad_tol) << "chunk " << chunk;
  if (w_grad) {
    EXPECT_LE(max_rel_diff(a.w.grad(), b.w.grad()), grad_tol) << "chunk " << chunk;
  } else {
    EXPECT_FALSE(a.w.grad().defined());
  }
}

}  // namespace

TEST(LinearCrossEntropy, F32MatchesTheUnchunkedPathForAnyChunking) {
  for (int64_t chunk : {1, 4, 5, 13, 100, 0})  // 4 and 5 leave a short last chunk; 13, 100, 0: one chunk
    for (Reduction r : {Reduction::Mean, Reduction::Sum}) expect_matches(DType::F32, chunk, r, 1e-6, 1e-5);
}

TEST(LinearCrossEntropy, Bf16MatchesTheUnchunkedPath) {
  // The logits and lse are the same per row; dW is accumulated chunk by chunk in bf16.
  for (int64_t chunk : {4, 13}) expect_matches(DType::BF16, chunk, Reduction::Mean, 1e-6, 2e-2);
}

TEST(LinearCrossEntropy, FrozenHeadGetsNoGradient) { expect_matches(DType::F32, 4, Reduction::Mean, 1e-6, 1e-5, false); }

TEST(LinearCrossEntropy, AllTargetsIgnoredGiveZeroLossAndGradients) {
  Case c = make_case(DType::F32, true, true);
  Tensor l = linear_cross_entropy(c.x, c.w, c.targets, -100, Reduction::Mean, 4);
  EXPECT_EQ(l.item(), 0.0);
  l.backward();
  for (double v : c.x.grad().to_double_vector()) ASSERT_EQ(v, 0.0);
  for (double v : c.w.grad().to_double_vector()) ASSERT_EQ(v, 0.0);
}

TEST(LinearCrossEntropy, TiedHeadGradientAddsToTheEmbeddings) {
  // GPT-2's tied head: the table is both the embedding and the head; its gradient is the sum.
  auto run = [](bool chunked) {
    Generator gen(5);
    Tensor w = randn({kV, kC}, gen, 0.5f, DType::F32);
    w.set_requires_grad(true);
    std::vector<int64_t> ids(static_cast<size_t>(kN)), t(static_cast<size_t>(kN));
    for (int64_t i = 0; i < kN; ++i) ids[size_t(i)] = (i * 31) % kV, t[size_t(i)] = (i * 7 + 1) % kV;
    Tensor h = embedding(from_ints(ids, {kN}), w);
    Tensor tg = from_ints(t, {kN});
    Tensor l = chunked ? linear_cross_entropy(h, w, tg, -100, Reduction::Mean, 3) : cross_entropy(linear(h, w, Tensor()), tg);
    l.backward();
    return w.grad();
  };
  EXPECT_LE(max_rel_diff(run(true), run(false)), 1e-5);
}

TEST(LinearCrossEntropy, NoAllocationHoldsMoreThanOneChunkOfLogits) {
  Case c = make_case(DType::F32);
  Allocator& a = allocator_for(Device::cpu());
  a.clear_history();
  a.set_history(true);
  Tensor l = linear_cross_entropy(c.x, c.w, c.targets, -100, Reduction::Mean, 4);
  l.backward();
  a.set_history(false);
  int64_t largest = 0;
  for (const MemoryEvent& e : a.history())
    if (e.action == MemoryEvent::Action::Alloc && e.requested != kV * kC * 4) largest = std::max(largest, e.requested);
  a.clear_history();
  EXPECT_GE(largest, 4 * kV * 4);  // one chunk of f32 logits is allocated
  EXPECT_LT(largest, 5 * kV * 4);  // and never more
}

TEST(LinearCrossEntropy, PerRowLossesMatchTheUnchunkedPath) {
  // Reduction::None (a DPO run's per-token log-probabilities): each row's loss, 0 where ignored,
  // and a per-row gradient (here a weighted sum of the rows) flows back as through cross_entropy.
  std::vector<float> wts(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) wts[size_t(i)] = float(i % 4) - 1.5f;
  for (int64_t chunk : {1, 4, 13, 0}) {
    Case a = make_case(DType::F32), b = make_case(DType::F32);
    Tensor ra = linear_cross_entropy(a.x, a.w, a.targets, -100, Reduction::None, chunk);
    Tensor rb = cross_entropy(linear(b.x, b.w, Tensor()), b.targets, -100, Reduction::None);
    ASSERT_EQ(ra.shape(), Shape{kN});
    EXPECT_LE(max_rel_diff(ra, rb), 1e-6) << "chunk " << chunk;
    for (int64_t i = 2; i < kN; i += 5) EXPECT_EQ(ra.to_double_vector()[size_t(i)], 0.0);
    sum_all(mul(ra, from_vector(wts, {kN}))).backward();
    sum_all(mul(rb, from_vector(wts, {kN}))).backward();
    EXPECT_LE(max_rel_diff(a.x.grad(), b.x.grad()), 1e-5) << "chunk " << chunk;
    EXPECT_LE(max_rel_diff(a.w.grad(), b.w.grad()), 1e-5) << "chunk " << chunk;
  }
}

TEST(LinearCrossEntropy, BadArgumentsAreRefused) {
  Case c = make_case(DType::F32);
  EXPECT_THROW(linear_cross_entropy(c.x, c.w, c.targets, -100, Reduction::Mean, -1), Error);
  EXPECT_THROW(linear_cross_entropy(c.x, c.w, from_ints({0, 1}, {2}), -100, Reduction::Mean, 4), Error);
  Tensor bad = from_ints(std::vector<int64_t>(kN, kV), {kN});
  EXPECT_THROW(linear_cross_entropy(c.x, c.w, bad, -100, Reduction::Mean, 4), Error);
  Generator gen(1);
  EXPECT_THROW(linear_cross_entropy(c.x, randn({kV, kC + 1}, gen), c.targets), Error);
}

namespace {

struct EagerKnob {  // LEANTRAIN_LOSS_CHUNK_EAGER for a scope
  explicit EagerKnob(bool on) { ::setenv("LEANTRAIN_LOSS_CHUNK_EAGER", on ? "1" : "0", 1); }
  ~EagerKnob() { ::unsetenv("LEANTRAIN_LOSS_CHUNK_EAGER"); }
};

std::vector<uint8_t> bits(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(size_t(c.nbytes()));
  std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

// Loss, dHidden and dW of the chunked op, eager or recomputing, with the loss scaled by `g`
// before backward (what micro-batches or a caller do).
std::vector<std::vector<uint8_t>> chunked_run(bool eager, DType dt, int64_t chunk, Reduction r, double g,
                                              bool w_grad = true, Device dev = Device::cpu()) {
  EagerKnob k(eager);
  Case c = make_case(dt, w_grad);
  if (!dev.is_cpu()) {  // the same values as leaves on `dev`
    c.x = c.x.detach().to(dev).set_requires_grad(true);
    c.w = c.w.detach().to(dev).set_requires_grad(w_grad);
    c.targets = c.targets.to(dev);
  }
  Tensor l = linear_cross_entropy(c.x, c.w, c.targets, -100, r, chunk);
  std::vector<std::vector<uint8_t>> out{bits(l)};
  (g == 1.0 ? l : scale(l, g)).backward();
  out.push_back(bits(c.x.grad()));
  if (w_grad) out.push_back(bits(c.w.grad()));
  else EXPECT_FALSE(c.w.grad().defined());
  return out;
}

}  // namespace

// Eager: the gradients made in the forward, scaled in the backward, are the recomputing
// backward's bit for bit when the scale is a power of two (here 1 and 1/4), f32 and bf16, any
// chunking, mean and sum, a frozen head.
TEST(LinearCrossEntropy, EagerGradientsAreTheRecomputedOnesBitwise) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t chunk : {1, 4, 13, 0})
      for (Reduction r : {Reduction::Mean, Reduction::Sum})
        for (double g : {1.0, 0.25})
          EXPECT_EQ(chunked_run(true, dt, chunk, r, g), chunked_run(false, dt, chunk, r, g))
              << dtype_name(dt) << " chunk " << chunk << " g " << g;
  EXPECT_EQ(chunked_run(true, DType::F32, 4, Reduction::Mean, 1.0, false),
            chunked_run(false, DType::F32, 4, Reduction::Mean, 1.0, false));
}

TEST(LinearCrossEntropy, CudaEagerGradientsAreTheRecomputedOnesBitwise) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device d = Device::cuda(0);
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t chunk : {4, 0})
      for (double g : {1.0, 0.25})
        EXPECT_EQ(chunked_run(true, dt, chunk, Reduction::Mean, g, true, d),
                  chunked_run(false, dt, chunk, Reduction::Mean, g, true, d))
            << dtype_name(dt) << " chunk " << chunk << " g " << g;
}

// Eager runs each chunk's GEMM once (the forward's), where recomputing runs it again in the backward:
// the eager forward holds dHidden and dW for the backward instead of the hidden rows. Under no
// gradient (evaluation) and for per-row losses it is the plain forward.
TEST(LinearCrossEntropy, EagerOnlyWhenAGradientIsWanted) {
  EagerKnob k(true);
  Case c = make_case(DType::F32);
  {
    NoGradGuard no;
    Tensor l = linear_cross_entropy(c.x, c.w, c.targets, -100, Reduction::Mean, 4);
    EXPECT_FALSE(l.requires_grad());
  }
  Tensor rows = linear_cross_entropy(c.x, c.w, c.targets, -100, Reduction::None, 4);
  EagerKnob off(false);
  Case d = make_case(DType::F32);
  Tensor ref = linear_cross_entropy(d.x, d.w, d.targets, -100, Reduction::None, 4);
  EXPECT_EQ(bits(rows), bits(ref));
  sum_all(rows).backward();
  sum_all(ref).backward();
  EXPECT_EQ(bits(c.x.grad()), bits(d.x.grad()));
}
