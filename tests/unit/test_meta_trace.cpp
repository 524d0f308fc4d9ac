// A whole training-like sequence (parameter init, forward and backward of a tiny
// transformer block with an MLP, gradient accumulation over two micro-batches, an update)
// must make the same allocations on meta as on the CPU: the premise of the dry-run planner.
#include <gtest/gtest.h>

#include "leantrain/autograd.h"
#include "leantrain/ops.h"

#include <functional>

using namespace lt;

namespace {

struct Block {
  Tensor wte, ln_w, ln_b, w_qkv, b_qkv, w_o, rms_w, w_up, b_up, w_down, head;
  std::vector<Tensor> params() const { return {wte, ln_w, ln_b, w_qkv, b_qkv, w_o, rms_w, w_up, b_up, w_down, head}; }
};

constexpr int64_t kB = 2, kT = 6, kC = 16, kH = 2, kV = 11;

Block make_block(Device dev, DType dt) {
  MemoryCategoryScope s(Category::Parameter);
  Generator gen(3);
  auto p = [&](const Shape& shape) { return randn(shape, gen, 0.2f, dt, dev).set_requires_grad(true); };
  return {p({kV, kC}), p({kC}), p({kC}), p({3 * kC, kC}), p({3 * kC}), p({kC, kC}),
          p({kC}),     p({4 * kC, kC}), p({4 * kC}), p({kC, 4 * kC}), p({kV, kC})};
}

Tensor loss_of(const Block& m, const Tensor& ids, const Tensor& targets, const Tensor& mask, Generator& gen) {
  const int64_t D = kC / kH;
  Tensor x = embedding(ids, m.wte);                                       // [B, T, C]
  Tensor qkv = linear(layer_norm(x, m.ln_w, m.ln_b), m.w_qkv, m.b_qkv);   // [B, T, 3C]
  qkv = permute(reshape(qkv, {kB, kT, 3, kH, D}), {2, 0, 3, 1, 4});       // [3, B, H, T, D]
  Tensor q = rotary_embedding(select(qkv, 0, 0)), k = rotary_embedding(select(qkv, 0, 1));
  Tensor a = scaled_dot_product_attention(q, k, select(qkv, 0, 2), true, mask);
  a = reshape(permute(a, {0, 2, 1, 3}), {kB, kT, kC});
  x = add(x, dropout(linear(a, m.w_o, Tensor()), 0.1, true, gen));
  Tensor h = gelu(linear(rms_norm(x, m.rms_w), m.w_up, m.b_up));
  x = add(x, linear(h, m.w_down, Tensor()));
  Tensor logits = linear(x, m.head, Tensor());
  return cross_entropy(reshape(logits, {kB * kT, kV}), reshape(targets, {kB * kT}));
}

// Runs two accumulated micro-batches and an SGD-like update; returns the allocation trace.
std::vector<MemoryEvent> train_trace(Device dev, DType dt, MemoryStats* stats) {
  Tensor ids = from_ints({1, 4, 2, 9, 0, 3, 5, 5, 7, 10, 2, 1}, {kB, kT}, DType::I64, dev);
  Tensor targets = from_ints({4, 2, 9, 0, 3, -100, 5, 7, 10, 2, 1, 6}, {kB, kT}, DType::I64, dev);
  Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, {kB, kT}, DType::U8, dev);
  Allocator& alloc = allocator_for(dev);
  alloc.clear_history();
  alloc.set_history(true);
  alloc.reset_peak_stats();
  const int64_t base = alloc.stats().allocated_bytes.current;
  {
    Block m = make_block(dev, dt);
    Generator gen(11);
    for (int micro = 0; micro < 2; ++micro) {
      MemoryCategoryScope s(Category::Activation);
      loss_of(m, ids, targets, mask, gen).backward();
    }
    NoGradGuard ng;
    for (const Tensor& p : m.params()) add_(p, scale(p.grad(), -0.1));
    zero_grad(m.params());
  }
  alloc.set_history(false);
  if (stats) {
    *stats = alloc.stats();
    stats->allocated_bytes.peak -= base;
  }
  std::vector<MemoryEvent> trace = alloc.history();
  alloc.clear_history();
  return trace;
}

TEST(MetaTrace, TrainingStepMatchesCpu) {
  for (DType dt : {DType::F32, DType::BF16}) {
    MemoryStats cpu_stats, meta_stats;
    std::vector<MemoryEvent> cpu = train_trace(Device::cpu(), dt, &cpu_stats);
    std::vector<MemoryEvent> meta = train_trace(Device::meta(), dt, &meta_stats);
    ASSERT_GT(cpu.size(), 100u) << "the sequence should allocate plenty";
    for (size_t i = 0; i < std::min(cpu.size(), meta.size()); ++i) {
      const MemoryEvent &a = cpu[i], &b = meta[i];
      ASSERT_TRUE(a.action == b.action && a.size == b.size && a.requested == b.requested && a.category == b.category)
          << dtype_name(dt) << " event " << i << ": cpu " << action_name(a.action) << " " << a.size << " "
          << category_name(a.category) << " op " << a.op << "; meta " << action_name(b.action) << " " << b.size << " "
          << category_name(b.category) << " op " << b.op;
    }
    ASSERT_EQ(cpu.size(), meta.size());
    EXPECT_EQ(cpu_stats.allocated_bytes.peak, meta_stats.allocated_bytes.peak);
    // Gradients mostly arrive by retagging a backward buffer (no event), so compare the
    // per-category peaks too.
    for (int c = 0; c < kNumCategories; ++c)
      EXPECT_EQ(cpu_stats.category[size_t(c)].peak, meta_stats.category[size_t(c)].peak) << category_name(Category(c));
    EXPECT_GT(cpu_stats.category[size_t(Category::Gradient)].peak, 0);
    EXPECT_GT(cpu_stats.category[size_t(Category::Parameter)].peak, 0);
  }
}

// The comparison is not vacuous: a different configuration changes the trace.
TEST(MetaTrace, DifferentDtypeGivesDifferentTrace) {
  std::vector<MemoryEvent> a = train_trace(Device::meta(), DType::F32, nullptr);
  std::vector<MemoryEvent> b = train_trace(Device::meta(), DType::BF16, nullptr);
  bool differ = a.size() != b.size();
  for (size_t i = 0; !differ && i < a.size(); ++i) differ = a[i].size != b[i].size;
  EXPECT_TRUE(differ);
}

// A copy between a device and the host moves no data when the device is meta, but allocates on
// it what a GPU copy would: widening a bf16 device tensor into an f32 host buffer casts on the
// device first (an f32 temporary of the tensor's size, category other); a non-contiguous device
// destination is filled through a contiguous temporary. Before, meta skipped both, and
// --offload optimizer's runs mapped a 250 MiB segment their plans did not (issue 42).
TEST(MetaTrace, CrossDeviceCopyAllocatesWhatTheDeviceWould) {
  Allocator& al = allocator_for(Device::meta());
  auto events = [&](const std::function<void()>& f) {
    al.clear_history();
    al.set_history(true);
    f();
    al.set_history(false);
    std::vector<MemoryEvent> h;  // allocations and frees (the plain meta allocator maps a segment for each)
    for (const MemoryEvent& e : al.history())
      if (e.action == MemoryEvent::Action::Alloc || e.action == MemoryEvent::Action::Free) h.push_back(e);
    al.clear_history();
    return h;
  };
  Tensor dev16 = Tensor::empty({5, 7}, DType::BF16, Device::meta());
  Tensor dev32 = Tensor::empty({5, 7}, DType::F32, Device::meta());
  Tensor host32 = Tensor::empty({5, 7}, DType::F32, Device::cpu());
  std::vector<MemoryEvent> widen = events([&] { copy_(host32, dev16); });
  ASSERT_EQ(widen.size(), 2u);
  EXPECT_EQ(widen[0].action, MemoryEvent::Action::Alloc);
  EXPECT_EQ(widen[0].requested, 5 * 7 * 4);
  EXPECT_EQ(widen[0].category, Category::Other);
  EXPECT_EQ(widen[1].action, MemoryEvent::Action::Free);
  EXPECT_TRUE(events([&] { copy_(host32, dev32); }).empty()) << "same dtype, contiguous: copied as it is";
  Tensor wide = Tensor::empty({7, 5}, DType::F32, Device::meta());
  std::vector<MemoryEvent> strided = events([&] { copy_(transpose(wide, 0, 1), host32); });
  ASSERT_EQ(strided.size(), 2u) << "a non-contiguous device destination goes through a temporary";
  EXPECT_EQ(strided[0].requested, 5 * 7 * 4);
  EXPECT_TRUE(events([&] { copy_(dev32, host32); }).empty());
}

}  // namespace
