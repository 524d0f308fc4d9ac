// Cross-entropy's backward writes dlogits over the logits when nothing can read them again (the
// backward frees the graph, and only the saved view holds their buffer): the same gradients,
// one logits-sized buffer less. Held logits and retained graphs keep their values.
#include <gtest/gtest.h>

#include <algorithm>

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
