// Activation checkpointing changes no gradient: GPT-2 tiny and a ViT with dropout 0.1, every
// mode, gradients bitwise equal to the run without it (the recomputation must redraw the same
// dropout masks). Also with gradient accumulation and with post-accumulate-grad hooks that take
// the gradient away as a fused optimizer step does.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "checkpoint_helpers.h"
#include "leantrain/autocast.h"

using namespace lt;
using namespace ckpt_test;

namespace {

using Grads = std::vector<std::pair<std::string, std::vector<uint32_t>>>;

// One forward + backward per micro-batch, summed into .grad.
Grads gpt_grads(const std::string& spec, int micro_batches = 1) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  nn::apply_checkpointing(m, spec);
  for (int i = 0; i < micro_batches; ++i) {
    Tensor x = ids(2, 16, 256, 10 + uint64_t(i)), y = ids(2, 16, 256, 20 + uint64_t(i));
    m.loss(x, y).backward();
  }
  return grad_bits(m);
}

Grads vit_grads(const std::string& spec, int micro_batches = 1) {
  models::ViTConfig c = vit_tiny_dropout();
  models::ViT m(c, {.seed = 4});
  randomize_vit_head(m);
  nn::apply_checkpointing(m, spec);
  for (int i = 0; i < micro_batches; ++i) m.loss(images(3, c, 30 + uint64_t(i)), labels(3, 10, 40 + uint64_t(i))).backward();
  return grad_bits(m);
}

void expect_same(const Grads& ref, const Grads& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(ref[i].first, got[i].first);
    ASSERT_FALSE(ref[i].second.empty()) << ref[i].first << " has no gradient";
    ASSERT_TRUE(std::any_of(ref[i].second.begin(), ref[i].second.end(), [](uint32_t b) { return (b << 1) != 0; }))
        << ref[i].first << ": an all-zero gradient would make the comparison vacuous";
    EXPECT_TRUE(ref[i].second == got[i].second) << what << ": gradient of " << ref[i].first << " differs";
  }
}

TEST(CheckpointModels, Gpt2GradientsBitwiseEqualInEveryMode) {
  const Grads ref = gpt_grads("none");
  for (const char* spec : {"blocks", "every:2", "transformer\\.h\\.(0|3)", "selective", ".*\\.mlp", "transformer\\.h\\.1\\.attn"})
    expect_same(ref, gpt_grads(spec), spec);
}

TEST(CheckpointModels, VitGradientsBitwiseEqualInEveryMode) {
  const Grads ref = vit_grads("none");
  for (const char* spec : {"blocks", "every:2", "encoder\\.layers\\.encoder_layer_(0|1|2)", "selective"})
    expect_same(ref, vit_grads(spec), spec);
}

// The comparison can fail: dropout is on (gradients depend on the masks), and a region that
// does not rewind its generator (plain lt::checkpoint without them) gets different gradients.
TEST(CheckpointModels, WithoutRewindingTheGeneratorsGradientsDiffer) {
  const Grads ref = gpt_grads("none");
  models::GPT2Config c = gpt2_tiny_dropout();
  c.resid_pdrop = c.embd_pdrop = 0.0;
  models::GPT2 no_drop(c, {.seed = 3});
  no_drop.loss(ids(2, 16, 256, 10), ids(2, 16, 256, 20)).backward();
  EXPECT_NE(ref[5].second, grad_bits(no_drop)[5].second) << "dropout should change the gradients";

  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  for (const std::string& path : nn::select_checkpoint_modules(m, "blocks")) {
    m.find_module(path)->set_forward_wrapper([](nn::Module& self, const Tensor& x, const nn::Module::ForwardFn& f) {
      return checkpoint(f, x, {.params = self.parameters()});  // generators left out on purpose
    });
  }
  m.loss(ids(2, 16, 256, 10), ids(2, 16, 256, 20)).backward();
  EXPECT_NE(ref[5].second, grad_bits(m)[5].second) << ref[5].first;
}

TEST(CheckpointModels, ComposesWithGradientAccumulation) {
  expect_same(gpt_grads("none", 2), gpt_grads("blocks", 2), "gpt2 blocks x2");
  expect_same(gpt_grads("none", 2), gpt_grads("selective", 2), "gpt2 selective x2");
  expect_same(vit_grads("none", 3), vit_grads("every:2", 3), "vit every:2 x3");
  // Accumulation really accumulated: two micro-batches differ from one.
  EXPECT_NE(gpt_grads("blocks", 2)[5].second, gpt_grads("blocks", 1)[5].second);
}

// A hook that consumes each gradient as it is accumulated and frees it (what --fused-step does).
struct Consumed {
  std::map<std::string, int> calls;
  std::map<std::string, std::vector<uint32_t>> seen;  // the gradient each hook saw, per backward
};

Consumed hooked_run(const std::string& spec) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  nn::apply_checkpointing(m, spec);
  Consumed c;
  for (auto& [name, p] : m.named_parameters()) {
    std::string n = name;
    p.register_post_accumulate_grad_hook([&c, n](Tensor& param) {
      ++c.calls[n];
      std::vector<uint32_t> b = bits(param.grad());
      c.seen[n].insert(c.seen[n].end(), b.begin(), b.end());
      param.set_grad(Tensor());  // the update consumed it: no gradient buffer is kept
    });
  }
  for (int i = 0; i < 2; ++i) m.loss(ids(2, 16, 256, 10 + uint64_t(i)), ids(2, 16, 256, 20 + uint64_t(i))).backward();
  for (auto& [name, p] : m.named_parameters()) EXPECT_FALSE(p.grad().defined()) << spec << ": " << name;
  return c;
}

TEST(CheckpointModels, PostAccumulateGradHooksFireOnceWithTheSameGradients) {
  Consumed ref = hooked_run("none");
  ASSERT_EQ(ref.calls.size(), models::GPT2(gpt2_tiny_dropout(), {.seed = 3}).named_parameters().size());
  for (const char* spec : {"blocks", "selective", "every:3"}) {
    Consumed got = hooked_run(spec);
    EXPECT_EQ(got.calls, ref.calls) << spec << ": each hook fires once per backward";
    for (auto& [name, b] : ref.seen) EXPECT_TRUE(got.seen[name] == b) << spec << ": " << name;
  }
  for (auto& [name, n] : ref.calls) EXPECT_EQ(n, 2) << name;
}

// The recomputation runs under the autocast of its forward, even when backward runs outside it.
TEST(CheckpointModels, RecomputationKeepsTheForwardsAutocast) {
  auto run = [](const std::string& spec, bool backward_inside) {
    models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
    nn::apply_checkpointing(m, spec);
    Tensor loss;
    {
      AutocastGuard bf16(DType::BF16);
      loss = m.loss(ids(2, 16, 256, 10), ids(2, 16, 256, 20));
      if (backward_inside) loss.backward();
    }
    if (!backward_inside) loss.backward();
    return grad_bits(m);
  };
  const Grads ref = run("none", true);
  expect_same(ref, run("blocks", false), "blocks, bf16 autocast, backward outside it");
  expect_same(ref, run("selective", true), "selective, bf16 autocast");
  EXPECT_NE(ref[5].second, gpt_grads("none")[5].second) << "autocast changes the gradients";
}

// A wrapper installed before (a sharding gather, say) runs inside the region: once in the
// forward, once more in the recomputation, with the same result.
TEST(CheckpointModels, ComposesWithAnEarlierWrapper) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  int calls = 0;
  nn::Module* block = m.find_module("transformer.h.1");
  block->set_forward_wrapper([&calls](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
    ++calls;
    return f(x);
  });
  nn::checkpoint_module(*block);
  m.loss(ids(2, 16, 256, 10), ids(2, 16, 256, 20)).backward();
  EXPECT_EQ(calls, 2);
  Grads ref = gpt_grads("none");
  expect_same(ref, grad_bits(m), "wrapped and checkpointed");
}

// Evaluation and generation run under inference mode: the wrapper steps aside.
TEST(CheckpointModels, InferenceModeRecordsNothing) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  nn::apply_checkpointing(m, "blocks");
  InferenceModeGuard inf;
  Tensor y = m.forward(ids(1, 8, 256, 1));
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
