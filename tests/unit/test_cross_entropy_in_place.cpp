// Cross-entropy's backward writes dlogits over the logits when nothing can read them again (the
// backward frees the graph, and only the saved view holds their buffer): the same gradients,
// one logits-sized buffer less. Held logits and retained graphs keep their values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

constexpr int64_t kN = 12, kC = 16, kV = 1001, kLd = 1008;  // bf16 rows of 1001 are padded to 1008

struct Head {
  Tensor x, w, targets;
};

Head make_head() {
  Generator gen(3);
  Head h;
  h.x = randn({kN, kC}, gen, 1.0f, DType::BF16);
  h.w = randn({kV, kC}, gen, 1.0f, DType::BF16);
  h.x.set_requires_grad(true);
  h.w.set_requires_grad(true);
  std::vector<int64_t> t(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) t[size_t(i)] = i % 4 == 1 ? -100 : (i * 37) % kV;
  h.targets = from_ints(t, {kN});
  return h;
}

// Requested bytes of every allocation `backward` makes.
std::vector<int64_t> backward_allocations(const Tensor& loss, bool retain = false) {
  Allocator& a = allocator_for(Device::cpu());
  a.clear_history();
  a.set_history(true);
  loss.backward(Tensor(), retain);
  a.set_history(false);
  std::vector<int64_t> out;
  for (const MemoryEvent& e : a.history())
    if (e.action == MemoryEvent::Action::Alloc) out.push_back(e.requested);
  a.clear_history();
  return out;
}

bool has(const std::vector<int64_t>& v, int64_t n) { return std::find(v.begin(), v.end(), n) != v.end(); }

}  // namespace

TEST(CrossEntropyInPlace, UnheldLogitsTakeTheGradientWithTheSameValues) {
  Head a = make_head(), b = make_head();
  // a: the logits are a temporary, as in Model::loss; b: the caller keeps them.
  Tensor la = cross_entropy(linear(a.x, a.w, Tensor()), a.targets);
  Tensor logits_b = linear(b.x, b.w, Tensor());
  Tensor lb = cross_entropy(logits_b, b.targets);
  const std::vector<int64_t> allocs_a = backward_allocations(la), allocs_b = backward_allocations(lb);
  const int64_t dlogits_bytes = kN * kLd * 2;
  EXPECT_FALSE(has(allocs_a, dlogits_bytes)) << "the unheld logits were not overwritten in place";
  EXPECT_TRUE(has(allocs_b, dlogits_bytes)) << "held logits need their own dlogits";
  EXPECT_EQ(a.x.grad().to_float_vector(), b.x.grad().to_float_vector());
  EXPECT_EQ(a.w.grad().to_float_vector(), b.w.grad().to_float_vector());
}

TEST(CrossEntropyInPlace, HeldLogitsKeepTheirValues) {
  Head h = make_head();
  Tensor logits = linear(h.x, h.w, Tensor());
  const std::vector<float> before = logits.to_float_vector();
  cross_entropy(reshape(logits, {kN, kV}), h.targets).backward();
  EXPECT_EQ(logits.to_float_vector(), before);
}

// A retained graph is read again: the second backward sees the logits of the forward.
TEST(CrossEntropyInPlace, RetainedGraphKeepsTheLogits) {
  Head h = make_head(), ref = make_head();
  Tensor loss = cross_entropy(linear(h.x, h.w, Tensor()), h.targets);
  const std::vector<int64_t> first = backward_allocations(loss, true);
  EXPECT_TRUE(has(first, kN * kLd * 2));
  const std::vector<float> once = h.w.grad().to_float_vector();
  loss.backward();  // frees the graph: may now write in place
  cross_entropy(linear(ref.x, ref.w, Tensor()), ref.targets).backward();
  const std::vector<float> twice = h.w.grad().to_float_vector(), single = ref.w.grad().to_float_vector();
  ASSERT_EQ(twice.size(), single.size());
  EXPECT_EQ(once, single);
  for (size_t i = 0; i < twice.size(); ++i)
    ASSERT_EQ(twice[i], 2.0f * single[i]) << i;  // doubling is exact in bf16
}

// cross_entropy_in_place (a model's training loss) writes the gradient in the forward: the same
// loss and gradients as cross_entropy, bit for bit on the CPU through loss.backward()'s seed (no
// multiplication). Any other gradient scales the rows already rounded to bf16 (cross_entropy
// rounds once, after scaling): within a bf16 rounding of each other.
TEST(CrossEntropyInPlace, ForwardWrittenGradientEqualsTheBackwardOne) {
  for (float g : {1.0f, 3.0f}) {
    SCOPED_TRACE("gradient " + std::to_string(g));
    Head a = make_head(), b = make_head();
    Tensor la = cross_entropy_in_place(linear(a.x, a.w, Tensor()), a.targets);
    Tensor lb = cross_entropy(linear(b.x, b.w, Tensor()), b.targets);
    EXPECT_EQ(la.item(), lb.item());
    if (g == 1.0f) {
      la.backward();
      lb.backward();
    } else {
      scale(la, g).backward();
      scale(lb, g).backward();
    }
    for (auto [ga, gb] : {std::pair{a.x.grad(), b.x.grad()}, std::pair{a.w.grad(), b.w.grad()}}) {
      const std::vector<float> va = ga.to_float_vector(), vb = gb.to_float_vector();
      ASSERT_EQ(va.size(), vb.size());
      if (g == 1.0f) {
        EXPECT_EQ(va, vb);
        continue;
      }
      double num = 0, den = 0;
      for (size_t i = 0; i < va.size(); ++i) num += (va[i] - vb[i]) * (va[i] - vb[i]), den += vb[i] * vb[i];
      EXPECT_LE(std::sqrt(num), 8e-3 * std::sqrt(den));
    }
  }
}

// The seed of ones multiplies nothing: backward allocates no logits-sized buffer; with the graph
// kept, a scaled backward copies the gradient first, so a second one sees it unchanged.
TEST(CrossEntropyInPlace, InPlaceLossScalesOnlyACopyWhenTheGraphIsKept) {
  Head a = make_head(), ref = make_head();
  Tensor loss = cross_entropy_in_place(linear(a.x, a.w, Tensor()), a.targets);
  EXPECT_FALSE(has(backward_allocations(loss, true), kN * kLd * 2)) << "the seed's backward copied the gradient";
  const std::vector<float> once = a.w.grad().to_float_vector();
  zero_grad({a.x, a.w});
  Tensor two = scale(loss, 2.0);
  EXPECT_TRUE(has(backward_allocations(two, true), kN * kLd * 2)) << "a kept graph's gradient was scaled in place";
  two.backward();
  cross_entropy(linear(ref.x, ref.w, Tensor()), ref.targets).backward();
  EXPECT_EQ(once, ref.w.grad().to_float_vector());
  const std::vector<float> twice = a.w.grad().to_float_vector(), single = ref.w.grad().to_float_vector();
  ASSERT_EQ(twice.size(), single.size());
  for (size_t i = 0; i < twice.size(); ++i) ASSERT_EQ(twice[i], 4.0f * single[i]) << i;  // 2 backwards of 2 x loss
}

// Without a gradient to compute (evaluation) the logits keep their values.
TEST(CrossEntropyInPlace, InPlaceLossWithoutGradientLeavesTheLogits) {
  Head h = make_head();
  NoGradGuard no_grad;
  Tensor logits = linear(h.x, h.w, Tensor());
  const std::vector<float> before = logits.to_float_vector();
  Tensor l = cross_entropy_in_place(logits, h.targets);
  EXPECT_EQ(logits.to_float_vector(), before);
  EXPECT_FALSE(l.requires_grad());
}

// On the GPU: GPT-2's head rows (50257 in rows of 50264, the shared-memory kernel) and rows too
// long for shared memory (the two kernels), against the CPU.
TEST(CrossEntropyInPlace, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (int64_t V : {int64_t(50257), int64_t(60001)}) {
    SCOPED_TRACE("V = " + std::to_string(V));
    const int64_t N = 9, C = 32;
    Generator gen(5);
    Tensor x = randn({N, C}, gen, 1.0f, DType::BF16), w = randn({V, C}, gen, 0.5f, DType::BF16);
    std::vector<int64_t> t(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) t[size_t(i)] = i == 4 ? -100 : (i * 7919) % V;
    Tensor targets = from_ints(t, {N});
    std::vector<float> loss, dx, dw;
    for (Device d : {Device::cpu(), Device::cuda()}) {
      Tensor xd = x.to(d).detach(), wd = w.to(d).detach();  // leaves on each device (x itself on the CPU)
      xd.set_requires_grad(true);
      wd.set_requires_grad(true);
      Tensor l = cross_entropy_in_place(linear(xd, wd, Tensor()), targets.to(d));
      l.backward();
      if (d.is_cpu()) {
        loss = l.to_float_vector(), dx = xd.grad().to_float_vector(), dw = wd.grad().to_float_vector();
        continue;
      }
      EXPECT_NEAR(l.item(), loss[0], 1e-3 * std::abs(loss[0]));
      auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
        double num = 0, den = 0;
        for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
        return a.size() == b.size() && std::sqrt(num) <= 2e-2 * std::sqrt(den);
      };
      EXPECT_TRUE(close(xd.grad().to_float_vector(), dx));
      EXPECT_TRUE(close(wd.grad().to_float_vector(), dw));
    }
  }
}
