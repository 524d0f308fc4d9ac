// Autograd semantics the later techniques build on: gradients accumulate with +=, zero_grad
// frees or zeroes them, post-accumulate-grad hooks see the final gradient once per backward,
// and inference mode keeps no activations (its activation peak is a fraction of training's).
#include <gtest/gtest.h>

#include "leantrain/autograd.h"
#include "leantrain/models.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

int64_t activation_peak_of_forward(models::Model& m, const Tensor& ids, bool inference) {
  Allocator& a = allocator_for(Device::cpu());
  a.reset_peak_stats();
  const int64_t before = a.stats().category[int(Category::Activation)].current;
  {
    MemoryCategoryScope s(Category::Activation);
    if (inference) {
      InferenceModeGuard g;
      Tensor y = m.forward(ids);
    } else {
      Tensor y = m.forward(ids);
    }
  }
  return a.stats().category[int(Category::Activation)].peak - before;
}

}  // namespace

TEST(AutogradModes, GradientsAccumulateAndZeroGradFreesOrZeroes) {
  Tensor w = from_vector(std::vector<float>{1, 2, 3}, {3});
  w.set_requires_grad(true);
  Tensor x = from_vector(std::vector<float>{4, 5, 6}, {3});
  sum_all(mul(w, x)).backward();
  sum_all(mul(w, x)).backward();  // += : twice x
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{8, 10, 12}));
  zero_grad({w}, /*set_to_none=*/false);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{0, 0, 0}));
  zero_grad({w}, /*set_to_none=*/true);
  EXPECT_FALSE(w.grad().defined());
}

TEST(AutogradModes, PostAccumulateHookSeesTheFinalGradientOnce) {
  Tensor w = from_vector(std::vector<float>{1, 2}, {2});
  w.set_requires_grad(true);
  int calls = 0;
  std::vector<float> seen;
  w.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++calls;
    seen = p.grad().to_float_vector();
  });
  // w is used twice: the hook runs after both contributions are summed.
  sum_all(add(mul(w, w), scale(w, 3.0))).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<float>{5, 7}));  // 2w + 3
}

TEST(AutogradModes, InferenceModeKeepsNoActivations) {
  models::GPT2Config c = models::GPT2Config::preset("gpt2-tiny");
  c.resid_pdrop = c.embd_pdrop = 0;
  models::GPT2 m(c, {});
  for (Tensor p : m.parameters()) p.set_requires_grad(true);
  std::vector<int64_t> v(4 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i * 7 % 256);
  Tensor ids = from_ints(v, {4, 64});
  const int64_t train_peak = activation_peak_of_forward(m, ids, false);
  const int64_t infer_peak = activation_peak_of_forward(m, ids, true);
  // Training keeps every block's saved tensors alive until backward (10 C per token a block:
  // docs/memory-model.md); inference frees each intermediate as soon as the next op has
  // consumed it, so only a few live at once (the MLP's two 4 C buffers at most).
  EXPECT_GT(train_peak, 0);
  EXPECT_LT(infer_peak * 3, train_peak) << "inference " << infer_peak << " B, training " << train_peak << " B";
  // And nothing requires grad in inference mode.
  InferenceModeGuard g;
  EXPECT_FALSE(m.forward(ids).requires_grad());
}
