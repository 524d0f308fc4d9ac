// Forward passes of small GPT-2 / ViT models on the CPU: shapes, causality, masks, dropout,
// training with a plain SGD update, a dry run on meta, and generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/models.h"
#include "small_models.h"

using namespace lt;
using lt::test::small_gpt2;
using lt::test::small_vit;

namespace {

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 1000 + i) % uint64_t(V));
  return from_ints(v, {B, T});
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "at " << i;
}

// Plain SGD, p -= lr * grad; returns the losses.
std::vector<double> train_sgd(models::Model& m, const Tensor& x, const Tensor& y, int steps, double lr) {
  std::vector<double> losses;
  auto params = m.parameters();
  for (int s = 0; s < steps; ++s) {
    zero_grad(params);
    Tensor loss = m.loss(x, y);
    losses.push_back(loss.item());
    loss.backward();
    NoGradGuard ng;
    for (Tensor& p : params) add_(p, scale(p.grad(), -lr));
  }
  return losses;
}

}  // namespace

TEST(ModelsForward, Gpt2ShapesCausalityAndMask) {
  models::GPT2 m(small_gpt2(), {.seed = 1});
  Tensor ids = random_ids(2, 8, 64, 1);
  Tensor logits = m.forward(ids);
  ASSERT_EQ(logits.shape(), Shape({2, 8, 64}));
  // Changing token 5 leaves positions 0..4 unchanged and changes 5.
  std::vector<int64_t> v = ids.to_int_vector();
  v[5] = (v[5] + 1) % 64;
  Tensor changed = m.forward(from_ints(v, {2, 8}));
  auto a = logits.to_float_vector(), b = changed.to_float_vector();
  expect_close(std::vector<float>(a.begin(), a.begin() + 5 * 64), std::vector<float>(b.begin(), b.begin() + 5 * 64), 1e-5f);
  double diff = 0;
  for (size_t i = 5 * 64; i < 6 * 64; ++i) diff += std::abs(a[i] - b[i]);
  EXPECT_GT(diff, 1e-4);
  // An all-ones mask changes nothing; masking token 0 changes later positions (i64 masks accepted).
  expect_close(m.forward(ids, ones({2, 8}, DType::U8)).to_float_vector(), a, 1e-5f);
  std::vector<int64_t> mv(16, 1);
  mv[0] = 0;
  auto masked = m.forward(ids, from_ints(mv, {2, 8})).to_float_vector();
  double d2 = 0;
  for (size_t i = 7 * 64; i < 8 * 64; ++i) d2 += std::abs(masked[i] - a[i]);
  EXPECT_GT(d2, 1e-4);
  EXPECT_THROW(m.forward(random_ids(1, 33, 64, 2)), Error);         // longer than n_positions
  EXPECT_THROW(m.forward(ones({2, 8})), Error);                     // float ids
  EXPECT_THROW(m.forward(ids, ones({2, 7}, DType::U8)), Error);     // mask shape
}

TEST(ModelsForward, VitShapes) {
  models::ViT m(small_vit(), {.seed = 2});
  Generator g(3);
  Tensor images = randn({3, 2, 8, 8}, g);
  EXPECT_EQ(m.forward(images).shape(), Shape({3, 4}));
  EXPECT_THROW(m.forward(randn({3, 1, 8, 8}, g)), Error);
  EXPECT_THROW(m.forward(randn({3, 2, 16, 16}, g)), Error);
}

TEST(ModelsForward, DropoutOnlyInTraining) {
  models::GPT2Config c = small_gpt2();
  c.resid_pdrop = c.embd_pdrop = 0.3;
  models::GPT2 m(c, {.seed = 4});
  Tensor ids = random_ids(1, 6, 64, 3);
  auto t1 = m.forward(ids).to_float_vector(), t2 = m.forward(ids).to_float_vector();
  EXPECT_NE(t1, t2);  // a fresh mask per call
  m.eval();
  expect_close(m.forward(ids).to_float_vector(), m.forward(ids).to_float_vector(), 0.0f);
}

TEST(ModelsForward, Gpt2LossDecreasesWithSgd) {
  models::GPT2 m(small_gpt2(), {.seed = 5});
  Tensor seq = random_ids(4, 17, 64, 4);
  Tensor x = contiguous(slice(seq, 1, 0, 16)), y = contiguous(slice(seq, 1, 1, 17));
  auto losses = train_sgd(m, x, y, 20, 0.2);
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.3);
  // Plain SGD on 4 sequences is noisy step to step: compare the mean of the last three.
  double tail = (losses[17] + losses[18] + losses[19]) / 3;
  EXPECT_LT(tail, 0.85 * losses.front());
  for (auto& [n, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
}

TEST(ModelsForward, VitLossDecreasesWithSgd) {
  models::ViT m(small_vit(), {.seed = 6});
  Generator g(7);
  Tensor images = randn({16, 2, 8, 8}, g);
  std::vector<int64_t> labels(16);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 4);
  auto losses = train_sgd(m, images, from_ints(labels, {16}), 15, 0.2);
  EXPECT_NEAR(losses.front(), std::log(4.0), 1e-4);  // the zero-initialised head predicts uniformly
  EXPECT_LT(losses.back(), 0.8 * losses.front());
}

TEST(ModelsForward, MetaDryRunHasNoMemoryBehindIt) {
  const int64_t cpu_before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
  models::GPT2 m(models::GPT2Config::preset("gpt2-124m"), {.device = Device::meta()});
  Tensor ids = zeros({2, 64}, DType::I64, Device::meta());
  Tensor loss = m.loss(ids, ids);
  EXPECT_TRUE(loss.device().is_meta());
  EXPECT_EQ(m.forward(ids).shape(), Shape({2, 64, 50257}));
  loss.backward();
  EXPECT_EQ(m.parameter("transformer.h.0.attn.c_attn.weight").grad().shape(), Shape({768, 2304}));
  for (auto& [n, p] : m.named_parameters()) ASSERT_EQ(p.raw_data(), nullptr) << n;
  EXPECT_EQ(allocator_for(Device::cpu()).stats().allocated_bytes.current, cpu_before);
}

TEST(ModelsForward, WrapperRunsOncePerBlock) {
  models::GPT2 m(small_gpt2(), {.seed = 8});
  int calls = 0;
  for (auto& [path, mod] : m.named_modules())
    if (std::string(mod->type_name()) == "GPT2Block")
      mod->set_forward_wrapper([&](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
        ++calls;
        return f(x);
      });
  m.forward(random_ids(1, 4, 64, 5));
  EXPECT_EQ(calls, 2);
}

TEST(ModelsForward, GenerateIsDeterministicAndKeepsNoGraph) {
  models::GPT2 m(small_gpt2(), {.seed = 9});
  std::vector<int64_t> prompt{1, 2, 3};
  std::vector<int64_t> streamed;
  auto a = m.generate(prompt, 40, 1.0, 10, 7, [&](int64_t t) { streamed.push_back(t); });
  auto b = m.generate(prompt, 40, 1.0, 10, 7);
  ASSERT_EQ(a.size(), 43u);  // runs past n_positions = 32: the context is cropped
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<int64_t>(a.begin(), a.begin() + 3), prompt);
  EXPECT_EQ(std::vector<int64_t>(a.begin() + 3, a.end()), streamed);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 64);
  EXPECT_NE(m.generate(prompt, 40, 1.0, 10, 8), a);
  EXPECT_TRUE(m.is_training());  // mode restored
  for (auto& [n, p] : m.named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  // Greedy picks the argmax of the model's last-position logits.
  auto g = m.generate(prompt, 1, 0.0);
  m.eval();
  auto logits = m.forward(from_ints(prompt, {1, 3})).to_float_vector();
  std::vector<float> last(logits.end() - 64, logits.end());
  EXPECT_EQ(g.back(), int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
  EXPECT_THROW(m.generate({}, 3), Error);
  EXPECT_THROW(m.generate({64}, 3), Error);
}

// generate stops after the stop token (a tokenizer's EOS) and samples only below sample_below
// (a tokenizer with fewer ids than the embedding table).
TEST(ModelsForward, GenerateStopsAtTheStopTokenAndKeepsBelowTheLimit) {
  models::GPT2 m(small_gpt2(), {.seed = 9});
  const std::vector<int64_t> prompt{1, 2, 3};
  const auto free_run = m.generate(prompt, 30, 1.0, 0, 5);
  const int64_t stop = free_run[10];  // a token the free run samples at step 8
  const auto first = size_t(std::find(free_run.begin() + 3, free_run.end(), stop) - free_run.begin());
  std::vector<int64_t> streamed;
  const auto stopped = m.generate(prompt, 30, 1.0, 0, 5, [&](int64_t t) { streamed.push_back(t); }, {stop});
  ASSERT_EQ(stopped.size(), first + 1);
  EXPECT_EQ(stopped, std::vector<int64_t>(free_run.begin(), free_run.begin() + int64_t(first) + 1));
  EXPECT_EQ(streamed.back(), stop);
  // Several stop tokens (a chat template's end of turn and EOS): the first one sampled ends it.
  const int64_t other = free_run[5];
  const auto first_other = size_t(std::find(free_run.begin() + 3, free_run.end(), other) - free_run.begin());
  EXPECT_EQ(m.generate(prompt, 30, 1.0, 0, 5, nullptr, {stop, other}).size(), std::min(first, first_other) + 1);
  for (int64_t t : m.generate(prompt, 200, 2.0, 0, 3, nullptr, {}, 10)) EXPECT_LT(t, 10);
  const auto only_zero = m.generate(prompt, 20, 0.0, 0, 3, nullptr, {}, 1);
  ASSERT_EQ(only_zero.size(), 23u);
  for (size_t i = 3; i < only_zero.size(); ++i) EXPECT_EQ(only_zero[i], 0);
}
