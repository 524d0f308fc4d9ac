// A skipped step (loss-scale overflow) runs Optimizer::dry_step: the allocations of an applied
// step, in the same order, and no update (Note [Dry compute], src/backend/dry_compute.h). Before,
// a skipped first step left the state unallocated, so a 16-mixed run's memory depended on whether
// its data overflowed, which the plan cannot know (issue 42: ResNet-50 16-mixed SGD, 99 MB).
#include <gtest/gtest.h>

#include "backend/dry_compute.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "leantrain/optim_lean.h"
#include "max_abs_diff.h"
#include "offload/offload_optimizer.h"

#include <functional>

using namespace lt;
using lt::test::max_abs_diff;

namespace {

struct Params {
  std::vector<Tensor> ts;
  std::vector<NamedTensor> named() const {
    std::vector<NamedTensor> out;
    for (size_t i = 0; i < ts.size(); ++i) out.emplace_back("p" + std::to_string(i), ts[i]);
    return out;
  }
};

// Three parameters (one 16-bit) with gradients, the same values every call.
Params make_params(DType dt16) {
  Generator gen(5);
  Params p;
  MemoryCategoryScope s(Category::Parameter);
  for (const Shape& shape : {Shape{7, 5}, Shape{5}, Shape{3, 4}}) {
    Tensor t = randn(shape, gen, 0.5f, shape.size() == 2 && shape[0] == 3 ? dt16 : DType::F32, Device::cpu());
    t.set_requires_grad(true);
    t.set_grad(randn(shape, gen, 0.1f, t.dtype(), Device::cpu()));
    p.ts.push_back(t);
  }
  return p;
}

std::unique_ptr<Optimizer> make_opt(const std::string& kind, const Params& p, bool master) {
  std::unique_ptr<Optimizer> o;
  if (kind == "sgd") o = std::make_unique<SGD>(p.named(), SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.25});
  else if (kind == "adamw") o = std::make_unique<AdamW>(p.named(), AdamWOptions{.lr = 0.01});
  else if (kind == "lion") o = std::make_unique<Lion>(p.named(), LionOptions{.lr = 0.01});
  else o = std::make_unique<AdamW8bit>(p.named(), AdamW8bitOptions{.lr = 0.01, .min_8bit_size = 1});
  o->set_master_weights(master);
  return o;
}

std::vector<MemoryEvent> traced(const std::function<void()>& f) {
  Allocator& al = allocator_for(Device::cpu());
  al.clear_history();
  al.set_history(true);
  f();
  al.set_history(false);
  std::vector<MemoryEvent> h = al.history();
  al.clear_history();
  return h;
}

}  // namespace

TEST(OptimDryStep, AllocatesWhatAStepAllocatesAndChangesNothing) {
  for (const std::string kind : {"sgd", "adamw", "lion", "adamw8bit"}) {
    for (bool master : {false, true}) {
      SCOPED_TRACE(kind + (master ? " with master weights" : ""));
      Params a = make_params(DType::BF16), b = make_params(DType::BF16);
      auto oa = make_opt(kind, a, master), ob = make_opt(kind, b, master);
      std::vector<Tensor> before;
      for (const Tensor& t : b.ts) before.push_back(t.clone());
      std::vector<MemoryEvent> applied = traced([&] { oa->step(0.5f); });
      std::vector<MemoryEvent> dry = traced([&] { ob->dry_step(0.5f); });
      ASSERT_FALSE(applied.empty());
      ASSERT_EQ(applied.size(), dry.size());
      for (size_t i = 0; i < applied.size(); ++i)
        ASSERT_TRUE(applied[i].action == dry[i].action && applied[i].size == dry[i].size &&
                    applied[i].category == dry[i].category)
            << "event " << i << ": " << action_name(applied[i].action) << " " << applied[i].size << " op "
            << applied[i].op << " vs " << action_name(dry[i].action) << " " << dry[i].size << " op " << dry[i].op;
      EXPECT_EQ(oa->state_bytes(), ob->state_bytes());
      EXPECT_EQ(ob->step_count(), 0);
      for (size_t i = 0; i < b.ts.size(); ++i) EXPECT_EQ(max_abs_diff(b.ts[i], before[i]), 0.0) << "parameter " << i;
      EXPECT_FALSE(DryCompute::active());
    }
  }
}

// After a skipped step the first applied one is bitwise the first step of a fresh optimizer: the
// state a dry step created is zero (and a master copy equal to the parameter), and steps that key
// on the first update (SGD's momentum = the gradient) still see step 0.
TEST(OptimDryStep, TheNextStepIsAFirstStep) {
  for (const std::string kind : {"sgd", "adamw", "lion", "adamw8bit"}) {
    for (bool master : {false, true}) {
      SCOPED_TRACE(kind + (master ? " with master weights" : ""));
      Params a = make_params(DType::BF16), b = make_params(DType::BF16);
      auto oa = make_opt(kind, a, master), ob = make_opt(kind, b, master);
      ob->dry_step(0.5f);
      ob->dry_step(0.25f);
      oa->step(0.5f);
      ob->step(0.5f);
      EXPECT_EQ(oa->step_count(), 1);
      EXPECT_EQ(ob->step_count(), 1);
      for (size_t i = 0; i < a.ts.size(); ++i) EXPECT_EQ(max_abs_diff(a.ts[i], b.ts[i]), 0.0) << "parameter " << i;
      const OptimizerStateDict sa = oa->state_dict(), sb = ob->state_dict();
      ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
      for (const auto& [k, t] : sa.tensors) EXPECT_EQ(max_abs_diff(t, sb.tensors.at(k)), 0.0) << k;
    }
  }
}

TEST(OptimDryStep, ScopesNestAndRestore) {
  EXPECT_FALSE(DryCompute::active());
  {
    DryCompute dry(true);
    EXPECT_TRUE(DryCompute::active());
    {
      DryCompute real(false);
      EXPECT_FALSE(DryCompute::active());
    }
    EXPECT_TRUE(DryCompute::active());
  }
  EXPECT_FALSE(DryCompute::active());
}

// The offloaded optimizer's host step runs outside the backends: on a dry step it takes its pinned
// state and buffers (a GPU sweep found a 16-mixed ResNet-50 whose skipped steps left 188 MB of
// pinned state untaken) and steps nothing; the next step is a first step.
TEST(OptimDryStep, TheOffloadedOptimizerTakesItsPinnedMemoryAndStepsNothing) {
  Allocator& host = pinned_host_allocator(Device::cpu());
  Params a = make_params(DType::BF16), b = make_params(DType::BF16);
  offload::OffloadOptions o;
  o.adamw = AdamWOptions{.lr = 0.01};
  offload::OffloadOptimizer oa({ParamGroup{a.named(), std::nullopt}}, o), ob({ParamGroup{b.named(), std::nullopt}}, o);
  std::vector<Tensor> before;
  for (const Tensor& t : b.ts) before.push_back(t.clone());
  const int64_t h0 = host.stats().allocated_bytes.current;
  ob.dry_step(0.5f);
  const int64_t dry_bytes = host.stats().allocated_bytes.current - h0;
  EXPECT_GT(dry_bytes, 0);
  EXPECT_EQ(ob.step_count(), 0);
  for (size_t i = 0; i < b.ts.size(); ++i) EXPECT_EQ(max_abs_diff(b.ts[i], before[i]), 0.0) << "parameter " << i;
  const int64_t h1 = host.stats().allocated_bytes.current;
  oa.step(0.5f);
  EXPECT_EQ(host.stats().allocated_bytes.current - h1, dry_bytes) << "a step takes what the dry step took";
  ob.step(0.5f);
  for (size_t i = 0; i < a.ts.size(); ++i) EXPECT_EQ(max_abs_diff(a.ts[i], b.ts[i]), 0.0) << "parameter " << i;
}
