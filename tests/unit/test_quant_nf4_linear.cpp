// nf4_linear against linear() on the dequantised weight: the same output and input gradient,
// no gradient for the frozen weight, refusals, and no dequantised weight left alive afterwards.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "error_of.h"
#include "leantrain/device.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "quant/nf4.h"
#include "quant/nf4_linear.h"

using namespace lt;
using lt::test::error_of;

namespace {

std::vector<float> normal(size_t n, uint64_t seed, float std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = cast(t, DType::F32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

}  // namespace

TEST(QuantNf4Linear, MatchesLinearOnTheDequantisedWeight) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Nf4Weight w = nf4_quantize(from_vector(normal(24 * 40, 1, 0.05f), {24, 40}, dt));
    const Tensor wd = nf4_dequantize(w, dt);
    const Tensor bias = from_vector(normal(24, 2, 0.1f), {24}, dt);
    const std::vector<float> xv = normal(2 * 3 * 40, 3, 1.0f);
    Tensor x1 = from_vector(xv, {2, 3, 40}, dt), x2 = from_vector(xv, {2, 3, 40}, dt);
    x1.set_requires_grad(true);
    x2.set_requires_grad(true);
    const Tensor y1 = nf4_linear(x1, w, bias), y2 = linear(x2, wd, bias);
    EXPECT_EQ(y1.shape(), (Shape{2, 3, 24}));
    EXPECT_EQ(values(y1), values(y2));
    const Tensor dy = from_vector(normal(2 * 3 * 24, 4, 1.0f), {2, 3, 24}, dt);
    y1.backward(dy);
    y2.backward(dy);
    ASSERT_TRUE(x1.grad().defined());
    EXPECT_EQ(x1.grad().shape(), x1.shape());
    EXPECT_EQ(values(x1.grad()), values(x2.grad()));
    EXPECT_FALSE(w.codes.requires_grad());
  }
}

TEST(QuantNf4Linear, NoGraphWithoutGrad) {
  const Nf4Weight w = nf4_quantize(from_vector(normal(8 * 64, 5, 0.05f), {8, 64}));
  const Tensor y = nf4_linear(from_vector(normal(64, 6, 1.0f), {1, 64}), w);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(values(y), values(linear(from_vector(normal(64, 6, 1.0f), {1, 64}), nf4_dequantize(w, DType::F32),
                                     Tensor())));
}

TEST(QuantNf4Linear, Refusals) {
  const Nf4Weight w = nf4_quantize(from_vector(normal(8 * 64, 5, 0.05f), {8, 64}));
  EXPECT_NE(error_of([&] { nf4_linear(zeros({2, 63}), w); }).find("input features"), std::string::npos);
  Tensor b = zeros({8});
  b.set_requires_grad(true);
  EXPECT_NE(error_of([&] { nf4_linear(zeros({2, 64}), w, b); }).find("bias requires grad"), std::string::npos);
  const Nf4Weight w1 = nf4_quantize(zeros({64}));
  EXPECT_NE(error_of([&] { nf4_linear(zeros({2, 64}), w1); }).find("[out, in]"), std::string::npos);
}

TEST(QuantNf4Linear, DequantisedWeightLivesOnlyInsideTheOp) {
  // On the meta device (allocations tracked, no data): the bf16 weight of 512 x 1024 (1 MiB) is
  // workspace while the forward or the backward runs and is gone when each returns.
  Allocator& a = allocator_for(Device::meta());
  const int64_t before = a.stats().category[int(Category::Workspace)].current;
  const Nf4Weight w = nf4_quantize(empty({512, 1024}, DType::BF16, Device::meta()));
  Tensor x = empty({4, 1024}, DType::BF16, Device::meta());
  x.set_requires_grad(true);
  a.reset_peak_stats();
  const Tensor y = nf4_linear(x, w);
  EXPECT_EQ(a.stats().category[int(Category::Workspace)].current, before);
  EXPECT_GE(a.stats().category[int(Category::Workspace)].peak, before + 512 * 1024 * 2);
  y.backward(empty({4, 512}, DType::BF16, Device::meta()));
  EXPECT_EQ(a.stats().category[int(Category::Workspace)].current, before);
  EXPECT_EQ(x.grad().shape(), (Shape{4, 1024}));
}

TEST(QuantNf4Linear, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const std::vector<float> wv = normal(64 * 96, 11, 0.05f), xv = normal(5 * 96, 12, 1.0f), gv = normal(5 * 64, 13, 1.0f);
  std::vector<float> y[2], dx[2];
  int k = 0;
  for (Device dev : {Device::cpu(), Device::cuda()}) {
    const Nf4Weight w = nf4_quantize(from_vector(wv, {64, 96}, DType::F32, dev));
    Tensor x = from_vector(xv, {5, 96}, DType::F32, dev);
    x.set_requires_grad(true);
    const Tensor out = nf4_linear(x, w);
    out.backward(from_vector(gv, {5, 64}, DType::F32, dev));
    y[k] = values(to_device(out, Device::cpu()));
    dx[k] = values(to_device(x.grad(), Device::cpu()));
    ++k;
  }
  // The same dequantised weight on both (bit-identical kernels); only the GEMMs' summation
  // orders differ (TF32 is not used for f32 GEMMs).
  for (size_t i = 0; i < y[0].size(); ++i) EXPECT_NEAR(y[0][i], y[1][i], 1e-4f) << i;
  for (size_t i = 0; i < dx[0].size(); ++i) EXPECT_NEAR(dx[0][i], dx[1][i], 1e-4f) << i;
}

namespace {

std::vector<MemoryEvent> nf4_trace(Device dev) {
  Allocator& alloc = allocator_for(dev);
  alloc.clear_history();
  alloc.set_history(true);
  {
    Nf4Weight w;
    {
      MemoryCategoryScope s(Category::Parameter);
      w = nf4_quantize(zeros({96, 200}, DType::BF16, dev));
    }
    MemoryCategoryScope s(Category::Activation);
    Tensor x = zeros({3, 200}, DType::BF16, dev);
    x.set_requires_grad(true);
    nf4_linear(x, w).backward(zeros({3, 96}, DType::BF16, dev));
  }
  alloc.set_history(false);
  std::vector<MemoryEvent> trace = alloc.history();
  alloc.clear_history();
  return trace;
}

}  // namespace

TEST(QuantNf4Linear, MetaTraceMatchesCpu) {
  // The dry-run premise: quantising and the op's forward and backward allocate the same on meta.
  const std::vector<MemoryEvent> cpu = nf4_trace(Device::cpu()), meta = nf4_trace(Device::meta());
  ASSERT_GT(cpu.size(), 10u);
  ASSERT_EQ(cpu.size(), meta.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(cpu[i].action == meta[i].action && cpu[i].size == meta[i].size &&
                cpu[i].category == meta[i].category)
        << "event " << i << ": cpu " << action_name(cpu[i].action) << " " << cpu[i].size << " op " << cpu[i].op
        << "; meta " << action_name(meta[i].action) << " " << meta[i].size << " op " << meta[i].op;
}
