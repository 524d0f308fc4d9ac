// AutocastPrecast: under autocast, one cast of the flat parameter store instead of one per
// parameter. The casts and every gradient are the per-parameter casts' bit for bit, gradients
// stay f32 on their parameters, meta allocates what the CPU does, and GPT-2 with lean saves off
// (the split residual, no wrappers) takes it in training and not in evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "checkpoint_helpers.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/models.h"

using namespace lt;

namespace {

struct PrecastRun {
  std::vector<std::vector<uint32_t>> grads;
  std::vector<uint32_t> out;
  int64_t allocs = 0, peak = 0;
};

int64_t count_allocs(const std::vector<MemoryEvent>& h) {
  return std::count_if(h.begin(), h.end(), [](const MemoryEvent& e) { return e.action == MemoryEvent::Action::Alloc; });
}

// The largest allocation asked for.
int64_t largest(const std::vector<MemoryEvent>& h) {
  int64_t m = 0;
  for (const MemoryEvent& e : h)
    if (e.action == MemoryEvent::Action::Alloc) m = std::max<int64_t>(m, e.requested);
  return m;
}

// Two linears of one flat store, forward and backward under bf16 autocast.
PrecastRun two_linears(Device dev, bool precast) {
  nn::ParamFactory pf({.device = dev, .seed = 11});
  nn::Linear l1(pf, 24, 40), l2(pf, 40, 8);
  pf.materialize();
  Generator g(3);
  Tensor x = randn({5, 24}, g, 1.0f, DType::F32, dev);
  Allocator& a = allocator_for(dev);
  const int64_t base = a.stats().allocated_bytes.current;
  a.reset_peak_stats();
  a.clear_history();
  a.set_history(true);
  PrecastRun r;
  {
    AutocastGuard bf16(DType::BF16);
    std::vector<Tensor> params{l1.weight(), l1.bias(), l2.weight(), l2.bias()};
    AutocastPrecast pre(precast ? params : std::vector<Tensor>{});
    EXPECT_EQ(pre.active(), precast);
    Tensor y = l2(gelu(l1(x)));
    EXPECT_EQ(y.dtype(), DType::BF16);
    Tensor loss = sum_all(cast(y, DType::F32));
    loss.backward();
    if (!dev.is_meta()) r.out = ckpt_test::bits(y);
  }
  a.set_history(false);
  r.allocs = count_allocs(a.history());
  r.peak = a.stats().allocated_bytes.peak - base;
  a.clear_history();
  for (const Tensor& p : {l1.weight(), l1.bias(), l2.weight(), l2.bias()}) {
    EXPECT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::F32);
    if (!dev.is_meta()) r.grads.push_back(ckpt_test::bits(p.grad()));
  }
  return r;
}

}  // namespace

TEST(AutocastPrecast, OneCastSameValuesAndGradients) {
  PrecastRun one = two_linears(Device::cpu(), true), each = two_linears(Device::cpu(), false);
  EXPECT_EQ(one.out, each.out);
  ASSERT_EQ(one.grads.size(), each.grads.size());
  for (size_t i = 0; i < one.grads.size(); ++i) EXPECT_EQ(one.grads[i], each.grads[i]) << "parameter " << i;
  // The input's cast and the backward's casts of the gradients stay; the four weight casts are one.
  EXPECT_EQ(each.allocs - one.allocs, 3);
  EXPECT_EQ(two_linears(Device::meta(), true).peak, one.peak);
}

TEST(AutocastPrecast, RefusesWhatIsNotOneF32Store) {
  AutocastGuard bf16(DType::BF16);
  nn::ParamFactory pf({.seed = 1, .flat = false});  // each parameter its own storage
  nn::Linear l(pf, 4, 4);
  AutocastPrecast separate({l.weight(), l.bias()});
  EXPECT_FALSE(separate.active());
  Tensor h = zeros({4}, DType::BF16);
  AutocastPrecast half({h});
  EXPECT_FALSE(half.active());
  AutocastGuard off(std::nullopt);
  nn::ParamFactory flat({.seed = 1});
  nn::Linear f(flat, 4, 4);
  flat.materialize();
  AutocastPrecast outside({f.weight(), f.bias()});
  EXPECT_FALSE(outside.active());
}

// GPT-2, lean saves off, bf16 autocast: the training loss casts the whole store at once (one
// allocation of at least 2 bytes per parameter); with lean saves on it does not; an evaluation
// (no gradients) never does.
TEST(AutocastPrecast, Gpt2TrainingLossPrecastsWithTheSplitResidual) {
  auto biggest = [](bool lean, bool grads, int64_t* params) {
    models::GPT2 m(ckpt_test::gpt2_tiny_dropout(), {.seed = 3});
    nn::set_lean_saves(m, lean);
    *params = 0;
    for (auto& [name, p] : m.named_parameters()) *params += p.numel();
    Tensor x = ckpt_test::ids(2, 16, 256, 10, Device::cpu()), y = ckpt_test::ids(2, 16, 256, 20, Device::cpu());
    Allocator& a = allocator_for(Device::cpu());
    a.clear_history();
    a.set_history(true);
    {
      AutocastGuard bf16(DType::BF16);
      std::optional<NoGradGuard> ng;
      if (!grads) ng.emplace();
      Tensor loss = m.loss(x, y);
      if (grads) loss.backward();
    }
    a.set_history(false);
    const int64_t n = largest(a.history());
    a.clear_history();
    return n;
  };
  int64_t params = 0;
  EXPECT_GE(biggest(false, true, &params), 2 * params);
  EXPECT_LT(biggest(true, true, &params), 2 * params);
  EXPECT_LT(biggest(false, false, &params), 2 * params);
}
