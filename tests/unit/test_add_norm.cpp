// add_layer_norm / add_rms_norm, the fused residual add + norm: equal to add() then the norm
// (both outputs and every gradient, whichever outputs are used, CPU in f32/bf16/f16), a float64
// gradcheck, one-line errors on bad operands, and the pre-norm blocks that use it: meta's
// allocation trace equals the CPU's, saved bytes do not grow, gradients equal the unfused block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "checkpoint_helpers.h"
#include "leantrain/error.h"
#include "unit/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

using V = std::vector<Tensor>;
using Grads = std::vector<std::pair<std::string, std::vector<uint32_t>>>;

enum class Use { Both, YOnly, SumOnly };
enum class Norm { Layer, LayerNoBias, Rms };

// What a consumer of the two outputs does with them: both feed the result (with different
// upstream gradients, through concat), or only one does.
Tensor consume(const Tensor& sum, const Tensor& y, Use use) {
  if (use == Use::YOnly) return y;
  if (use == Use::SumOnly) return sum;
  return concat({sum, y}, 0);
}

Tensor fused(Norm n, const V& p, Use use) {
  AddNormResult r = n == Norm::Rms ? add_rms_norm(p[0], p[1], p[2], 1e-6)
                                   : add_layer_norm(p[0], p[1], p[2], n == Norm::Layer ? p[3] : Tensor(), 1e-5);
  return consume(r.sum, r.y, use);
}

Tensor unfused(Norm n, const V& p, Use use) {
  Tensor h = add(p[0], p[1]);
  Tensor y = n == Norm::Rms ? rms_norm(h, p[2], 1e-6) : layer_norm(h, p[2], n == Norm::Layer ? p[3] : Tensor(), 1e-5);
  return consume(h, y, use);
}

V make_inputs(Norm n, DType dt, uint64_t seed) {
  Generator g(seed);
  V p{randn({3, 5, 32}, g, 1.0f, dt), randn({3, 5, 32}, g, 1.0f, dt), randn({32}, g, 1.0f, dt)};
  if (n == Norm::Layer) p.push_back(randn({32}, g, 1.0f, dt));
  for (Tensor& t : p) t.set_requires_grad(true);
  return p;
}

const char* norm_name(Norm n) { return n == Norm::Layer ? "layer" : n == Norm::LayerNoBias ? "layer_nobias" : "rms"; }
const char* use_name(Use u) { return u == Use::Both ? "both" : u == Use::YOnly ? "y only" : "sum only"; }

// On the CPU the fused op is defined as the unfused pair, so equality is bitwise in every
// dtype; the check is the autograd plumbing (two outputs, one node doing the work).
TEST(AddNorm, FusedEqualsUnfusedForwardAndGradientsOnCpu) {
  for (Norm n : {Norm::Layer, Norm::LayerNoBias, Norm::Rms})
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (Use use : {Use::Both, Use::YOnly, Use::SumOnly}) {
        SCOPED_TRACE(std::string(norm_name(n)) + " " + dtype_name(dt) + " " + use_name(use));
        V a = make_inputs(n, dt, 7), b = make_inputs(n, dt, 7);
        Tensor ya = fused(n, a, use), yb = unfused(n, b, use);
        ASSERT_EQ(ya.shape(), yb.shape());
        EXPECT_EQ(ya.to_double_vector(), yb.to_double_vector());
        Generator g(11);
        Tensor up = randn(ya.shape(), g, 1.0f, dt);
        ya.backward(up);
        yb.backward(up);
        for (size_t i = 0; i < a.size(); ++i) {
          SCOPED_TRACE("input " + std::to_string(i));
          ASSERT_EQ(a[i].grad().defined(), b[i].grad().defined());
          if (!b[i].grad().defined()) continue;
          EXPECT_EQ(a[i].grad().to_double_vector(), b[i].grad().to_double_vector());
          const std::vector<double> gb = b[i].grad().to_double_vector();
          EXPECT_TRUE(std::any_of(gb.begin(), gb.end(), [](double v) { return v != 0.0; })) << "all zero proves nothing";
        }
        // The norm's parameters get no gradient when only the sum is used.
        if (use == Use::SumOnly) EXPECT_FALSE(a[2].grad().defined());
      }
}

// x and residual the same tensor (x + x): both edges reach one node and add up.
TEST(AddNorm, SameTensorForBothAddends) {
  Generator g(3);
  Tensor x = randn({4, 16}, g).set_requires_grad(true), w = randn({16}, g).set_requires_grad(true);
  Tensor x2 = x.detach().clone().set_requires_grad(true);
  AddNormResult r = add_layer_norm(x, x, w, Tensor());
  concat({r.sum, r.y}, 0).backward(ones({8, 16}));
  Tensor h = add(x2, x2);
  concat({h, layer_norm(h, w.detach(), Tensor())}, 0).backward(ones({8, 16}));
  EXPECT_EQ(x.grad().to_double_vector(), x2.grad().to_double_vector());
}

TEST(AddNorm, Gradcheck) {
  for (Use use : {Use::Both, Use::YOnly, Use::SumOnly}) {
    SCOPED_TRACE(use_name(use));
    EXPECT_TRUE(gradcheck([use](const V& x) { return fused(Norm::Layer, x, use); },
                          {rand64({2, 3, 8}, 1), rand64({2, 3, 8}, 2), rand64({8}, 3), rand64({8}, 4)}));
    EXPECT_TRUE(gradcheck([use](const V& x) { return fused(Norm::Rms, x, use); },
                          {rand64({2, 3, 8}, 5), rand64({2, 3, 8}, 6), rand64({8}, 7)}));
  }
  // Frozen addends and weight: only the bias needs a gradient (no kernel, a row sum).
  Tensor x = rand64({3, 6}, 8), r = rand64({3, 6}, 9), w = rand64({6}, 10);
  x.set_requires_grad(false);
  r.set_requires_grad(false);
  w.set_requires_grad(false);
  EXPECT_TRUE(gradcheck([&](const V& p) { return add_layer_norm(x, r, w, p[0]).y; }, {rand64({6}, 11)}));
  // One addend frozen.
  EXPECT_TRUE(gradcheck([&](const V& p) { return fused(Norm::Layer, {x, p[0], p[1], p[2]}, Use::Both); },
                        {rand64({3, 6}, 12), rand64({6}, 13), rand64({6}, 14)}));
}

// Nothing is recorded without grad mode, and nothing requires grad.
TEST(AddNorm, NoGradRecordsNothing) {
  V p = make_inputs(Norm::Layer, DType::F32, 5);
  NoGradGuard ng;
  AddNormResult r = add_layer_norm(p[0], p[1], p[2], p[3]);
  EXPECT_FALSE(r.sum.requires_grad());
  EXPECT_FALSE(r.y.requires_grad());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_FALSE(e.why().empty());
    EXPECT_FALSE(e.fix().empty());
    const std::string all = e.what();
    EXPECT_EQ(all.find('\n'), std::string::npos) << "one line: " << all;
    return e.what_part();
  }
  return "";
}

TEST(AddNorm, BadOperandsGiveOneLineErrors) {
  Generator g(1);
  Tensor x = randn({2, 3, 8}, g), w = randn({8}, g);
  EXPECT_NE(error_of([&] { add_layer_norm(x, randn({2, 3, 4}, g), w, Tensor()); }).find("residual has [2, 3, 4]"),
            std::string::npos);
  // No broadcasting, even where add() would.
  EXPECT_NE(error_of([&] { add_layer_norm(x, randn({8}, g), w, Tensor()); }).find("add_layer_norm: x has shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { add_rms_norm(x, randn({2, 3, 8}, g, 1.0f, DType::BF16), w); }).find("dtype mismatch"),
            std::string::npos);
  EXPECT_NE(error_of([&] { add_layer_norm(x, x, randn({4}, g), Tensor()); }).find("weight has shape [4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { add_layer_norm(x, x, w, randn({3}, g)); }).find("bias"), std::string::npos);
  EXPECT_NE(error_of([&] { add_layer_norm(x, x, Tensor(), Tensor()); }).find("no weight"), std::string::npos);
  EXPECT_NE(error_of([&] { add_layer_norm(x, x.to(Device::meta()), w, Tensor()); }).find("different devices"),
            std::string::npos);
}

// ---- in the models ----

// A forward wrapper on every block's ln_2 that only calls the forward: the block then takes
// the unfused path (add, then ln_2 through its wrapper), everything else unchanged.
void unfuse(nn::Module& m) {
  for (auto& [path, mod] : m.named_modules())
    if (path.size() > 5 && path.compare(path.size() - 5, 5, ".ln_2") == 0)
      mod->set_forward_wrapper([](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) { return f(x); });
}

struct RunStats {
  int64_t after_forward = 0, peak = 0;  // allocated bytes, relative to before the forward
  std::vector<MemoryEvent> trace;
  Grads grads;
};

// forward() then backward (with `grad`, or none for a scalar) under the activation category,
// with the allocator's history on: the trace, and the bytes after forward and at the peak.
RunStats traced(Device dev, const std::function<Tensor()>& forward, const Tensor& grad) {
  Allocator& alloc = allocator_for(dev);
  RunStats s;
  alloc.clear_history();
  alloc.reset_peak_stats();
  const int64_t base = alloc.stats().allocated_bytes.current;
  alloc.set_history(true);
  {
    MemoryCategoryScope act(Category::Activation);
    Tensor out = forward();
    s.after_forward = alloc.stats().allocated_bytes.current - base;
    out.backward(grad);
  }
  alloc.set_history(false);
  s.peak = alloc.stats().allocated_bytes.peak - base;
  s.trace = alloc.history();
  alloc.clear_history();
  return s;
}

RunStats gpt_run(Device dev, bool fuse, const std::string& ckpt = "none") {
  models::GPT2 m(ckpt_test::gpt2_tiny_dropout(), {.device = dev, .seed = 3});
  if (!fuse) unfuse(m);
  nn::apply_checkpointing(m, ckpt);
  Tensor x = ckpt_test::ids(2, 16, 256, 10, dev), y = ckpt_test::ids(2, 16, 256, 20, dev);
  RunStats s = traced(dev, [&] { return m.loss(x, y); }, Tensor());
  if (!dev.is_meta()) s.grads = ckpt_test::grad_bits(m);
  return s;
}

void expect_same_trace(const std::vector<MemoryEvent>& meta, const std::vector<MemoryEvent>& cpu) {
  ASSERT_GT(cpu.size(), 50u);
  for (size_t i = 0; i < std::min(meta.size(), cpu.size()); ++i) {
    const MemoryEvent &a = meta[i], &b = cpu[i];
    ASSERT_TRUE(a.action == b.action && a.size == b.size && a.requested == b.requested && a.category == b.category)
        << "allocation " << i << ": meta " << action_name(a.action) << " " << a.size << " " << category_name(a.category)
        << ", cpu " << action_name(b.action) << " " << b.size << " " << category_name(b.category) << " (op "
        << (b.op ? b.op : "") << ")";
  }
  ASSERT_EQ(meta.size(), cpu.size());
}

// One GPT-2 block (transformer.h.1) on a random [B, T, C] input, forward and backward: the
// allocation trace (and so the planner's figures) on meta equals the CPU's, fused or not.
RunStats block_run(Device dev, bool fuse, const std::string& ckpt) {
  models::GPT2 m(ckpt_test::gpt2_tiny_dropout(), {.device = dev, .seed = 3});
  if (!fuse) unfuse(m);
  nn::apply_checkpointing(m, ckpt);
  auto* block = dynamic_cast<nn::PreNormBlock*>(m.find_module("transformer.h.1"));
  EXPECT_NE(block, nullptr);
  Generator g(5);
  Tensor x = randn({2, 16, 128}, g, 1.0f, DType::F32, dev).set_requires_grad(true);
  Tensor up = randn({2, 16, 128}, g, 1.0f, DType::F32, dev);
  return traced(dev, [&] { return (*block)(x); }, up);
}

TEST(AddNormModels, BlockMetaTraceEqualsCpuTrace) {
  for (const char* ckpt : {"none", "blocks", "selective"}) {
    int64_t folds[2] = {0, 0};
    for (bool fuse : {true, false}) {
      SCOPED_TRACE(std::string(ckpt) + (fuse ? " fused" : " unfused"));
      RunStats cpu = block_run(Device::cpu(), fuse, ckpt), meta = block_run(Device::meta(), fuse, ckpt);
      expect_same_trace(meta.trace, cpu.trace);
      EXPECT_EQ(meta.peak, cpu.peak);
      for (const MemoryEvent& e : cpu.trace)
        folds[fuse] += e.action == MemoryEvent::Action::Alloc && e.op && std::string(e.op) == "layer_norm_linear";
    }
    // A wrapper on ln_2 takes it out of the fold into fc1 (layer_norm_linear); ln_1's stays.
    EXPECT_GT(folds[false], 0) << ckpt << ": ln_1 folds in both";
    EXPECT_GT(folds[true], folds[false]) << ckpt << ": ln_2 folds only without its wrapper";
  }
  // Folding ln_2 into fc1 saves ln_2's input and statistics (saved anyway) instead of its
  // output: one [N, C] f32 buffer less after the forward; the peak only holds.
  RunStats f = block_run(Device::cpu(), true, "none"), u = block_run(Device::cpu(), false, "none");
  EXPECT_EQ(u.after_forward - f.after_forward, 2 * 16 * 128 * 4);
  EXPECT_LE(f.peak, u.peak);
}

// Same tensors saved (the sum, mean, rstd: what add + layer_norm saved), one [N, C] buffer
// less in the backward, and on the CPU the same gradients bit for bit.
TEST(AddNormModels, Gpt2FusedSavesNoMoreAndMatchesUnfused) {
  RunStats f = gpt_run(Device::cpu(), true), u = gpt_run(Device::cpu(), false);
  EXPECT_LT(f.after_forward, u.after_forward);  // ln_2's output is not saved (layer_norm_linear)
  EXPECT_LE(f.peak, u.peak);
  ASSERT_EQ(f.grads.size(), u.grads.size());
  for (size_t i = 0; i < f.grads.size(); ++i) EXPECT_TRUE(f.grads[i] == u.grads[i]) << f.grads[i].first;
}

// ViT blocks (torchvision names) fuse too; with ln_2 checkpointed on its own (a regex) the block
// takes the unfused path and still gives the same gradients, as do selective and blocks.
TEST(AddNormModels, VitFusedMatchesUnfusedAndSelective) {
  auto run = [](bool fuse, const std::string& ckpt) {
    models::ViTConfig c = ckpt_test::vit_tiny_dropout();
    models::ViT m(c, {.seed = 4});
    ckpt_test::randomize_vit_head(m);
    if (!fuse) unfuse(m);
    nn::apply_checkpointing(m, ckpt);
    m.loss(ckpt_test::images(3, c, 30), ckpt_test::labels(3, 10, 40)).backward();
    return ckpt_test::grad_bits(m);
  };
  const Grads ref = run(true, "none");
  const std::vector<std::pair<bool, std::string>> variants{
      {false, "none"}, {true, "selective"}, {true, "blocks"}, {true, ".*\\.ln_2"}};
  for (const auto& [fuse, ckpt] : variants) {
    SCOPED_TRACE(std::string(fuse ? "fused " : "unfused ") + ckpt);
    const Grads got = run(fuse, ckpt);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(got[i] == ref[i]) << ref[i].first;
  }
}

}  // namespace

namespace {

// GPT-2 with lean saves off: blocks hand the residual on as two terms (forward_split) and each
// next norm adds them in its kernel. `split` false keeps the old path (a pass-through wrapper on
// ln_f turns the split off for the whole stack: ln_f could not add the last two terms).
RunStats gpt_split_run(Device dev, bool split) {
  models::GPT2 m(ckpt_test::gpt2_tiny_dropout(), {.device = dev, .seed = 3});
  nn::set_lean_saves(m, false);
  if (!split)
    m.find_module("transformer.ln_f")
        ->set_forward_wrapper([](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) { return f(x); });
  Tensor x = ckpt_test::ids(2, 16, 256, 10, dev), y = ckpt_test::ids(2, 16, 256, 20, dev);
  RunStats s = traced(dev, [&] { return m.loss(x, y); }, Tensor());
  if (!dev.is_meta()) s.grads = ckpt_test::grad_bits(m);
  return s;
}

}  // namespace

// The split residual gives the unsplit stack's gradients bit for bit on the CPU (f32: the fused
// kernel adds the two gradients of a block's input in the same one addition the engine did),
// allocates no more, and meta's allocations (the planner) are still the CPU's.
TEST(AddNormModels, Gpt2SplitResidualMatchesUnsplit) {
  RunStats s = gpt_split_run(Device::cpu(), true), u = gpt_split_run(Device::cpu(), false);
  EXPECT_LE(s.peak, u.peak);
  EXPECT_LE(s.after_forward, u.after_forward);
  ASSERT_EQ(s.grads.size(), u.grads.size());
  for (size_t i = 0; i < s.grads.size(); ++i) EXPECT_TRUE(s.grads[i] == u.grads[i]) << s.grads[i].first;
  // The split path really ran: no separate residual add in the forward.
  auto adds = [](const RunStats& r) {
    return std::count_if(r.trace.begin(), r.trace.end(), [](const MemoryEvent& e) {
      return e.action == MemoryEvent::Action::Alloc && e.op && std::string(e.op) == "add_layer_norm";
    });
  };
  EXPECT_GT(adds(s), adds(u));
  // Meta's peak is the CPU's. (The whole model's CPU trace has a few host-side allocations
  // more than meta's, split or not: the split must add no other difference.)
  RunStats meta = gpt_split_run(Device::meta(), true), meta_u = gpt_split_run(Device::meta(), false);
  EXPECT_EQ(s.trace.size() - meta.trace.size(), u.trace.size() - meta_u.trace.size());
  EXPECT_EQ(meta_u.peak, u.peak);
  EXPECT_EQ(meta.peak, s.peak);
}

TEST(AddNormModels, ForwardSplitRefusesABlockThatDoesNotSplit) {
  models::GPT2 m(ckpt_test::gpt2_tiny_dropout(), {.seed = 3});  // lean saves on (the default)
  auto* block = dynamic_cast<nn::PreNormBlock*>(m.find_module("transformer.h.0"));
  ASSERT_NE(block, nullptr);
  EXPECT_FALSE(block->splits_residual());
  Tensor x = zeros({1, 4, 128});
  EXPECT_THROW(block->forward_split(x, Tensor(), Tensor()), Error);
  block->set_lean_saves(false);
  EXPECT_TRUE(block->splits_residual());
}
