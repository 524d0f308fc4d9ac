// batch_norm_relu against relu(batch_norm(...)) on the same device: the same bits for the output,
// the running statistics and every gradient (x, weight, bias), f32 / bf16 / f16 activations with
// f32 parameters (as under autocast) and f64, NCHW and NHWC, training and eval; on the CPU always
// and on CUDA when a GPU answers. Also: what the fused op saves (the norm's input and its own
// output, no more than the pair), and the ResNet module path taking it without changing a bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

struct Outcome {
  std::vector<std::vector<double>> values;  // y, running mean, running var, dx, dw, db[, dresidual]
};

// One norm (fused or not) of x [2, 5, 6, 7] (or [2, 6, 7, 5] NHWC) with a gradient that is
// negative and positive, some of it exactly zero, and NaN-free; with_residual: relu(norm + r).
Outcome run(Device dev, DType act, DType par, ImageLayout layout, bool training, bool fused,
            bool with_residual = false) {
  const bool cl = layout == ImageLayout::NHWC;
  const Shape xs = cl ? Shape{2, 6, 7, 5} : Shape{2, 5, 6, 7};
  Generator gen(7);
  Tensor x = randn(xs, gen, 1.0f, act).to(dev).set_requires_grad(true);
  Tensor w = randn({5}, gen, 1.0f, par).to(dev).set_requires_grad(true);
  Tensor b = randn({5}, gen, 0.5f, par).to(dev).set_requires_grad(true);
  Tensor rm = randn({5}, gen, 0.1f, par).to(dev), rv = (randn({5}, gen, 0.1f, par).to(dev));
  rv = add(mul(rv, rv), ones({5}, par, dev));  // positive variances
  Tensor g = randn(xs, gen, 1.0f, act).to(dev);
  Tensor r = randn(xs, gen, 1.0f, act).to(dev).set_requires_grad(true);
  Tensor y;
  if (with_residual)
    y = fused ? batch_norm_add_relu(x, r, w, b, rm, rv, Tensor(), training, 0.1, 1e-5, layout)
              : relu(add(batch_norm(x, w, b, rm, rv, Tensor(), training, 0.1, 1e-5, layout), r));
  else
    y = fused ? batch_norm_relu(x, w, b, rm, rv, Tensor(), training, 0.1, 1e-5, layout)
              : relu(batch_norm(x, w, b, rm, rv, Tensor(), training, 0.1, 1e-5, layout));
  y.backward(g);
  Outcome o{{y.to_double_vector(), rm.to_double_vector(), rv.to_double_vector(), x.grad().to_double_vector(),
             w.grad().to_double_vector(), b.grad().to_double_vector()}};
  if (with_residual) o.values.push_back(r.grad().to_double_vector());
  return o;
}

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda());
  return d;
}

}  // namespace

TEST(BatchNormRelu, SameBitsAsReluOfBatchNorm) {
  const char* names[] = {"y", "running_mean", "running_var", "dx", "dw", "db"};
  for (Device dev : devices())
    for (DType act : {DType::F64, DType::F32, DType::BF16, DType::F16})
      for (ImageLayout layout : {ImageLayout::NCHW, ImageLayout::NHWC})
        for (bool training : {true, false}) {
          if (dev.is_cuda() && act == DType::F64) continue;  // the CUDA kernels take 32- and 16-bit images
          const DType par = act == DType::F64 ? DType::F64 : DType::F32;
          SCOPED_TRACE(std::string(dev.is_cuda() ? "cuda " : "cpu ") + dtype_name(act) +
                       (layout == ImageLayout::NHWC ? " nhwc" : " nchw") + (training ? " train" : " eval"));
          const Outcome apart = run(dev, act, par, layout, training, false);
          // Both backwards of the fused op: the ReLU's mask kernel first (LEANTRAIN_BN_RELU=1, the
          // default) and the mask inside the norm's kernels (2).
          Outcome fused;
          for (const char* mode : {"1", "2"}) {
            ::setenv("LEANTRAIN_BN_RELU", mode, 1);
            fused = run(dev, act, par, layout, training, true);
            ::unsetenv("LEANTRAIN_BN_RELU");
            for (size_t k = 0; k < fused.values.size(); ++k)
              EXPECT_EQ(fused.values[k], apart.values[k]) << names[k] << ", LEANTRAIN_BN_RELU=" << mode;
          }
          // Not vacuous: the relu zeroed some outputs and some gradients passed.
          size_t zeros = 0, kept = 0;
          for (double v : fused.values[0]) (v == 0 ? zeros : kept) += 1;
          EXPECT_GT(zeros, 20u);
          EXPECT_GT(kept, 20u);
        }
}

// relu(norm(x) + residual) as one op: the same bits as the three ops, the residual's gradient
// included, in every layout, mode and dtype; the norm is rounded to x's dtype before the add.
TEST(BatchNormRelu, WithAResidualSameBitsAsReluOfAdd) {
  const char* names[] = {"y", "running_mean", "running_var", "dx", "dw", "db", "dresidual"};
  for (Device dev : devices())
    for (DType act : {DType::F64, DType::F32, DType::BF16, DType::F16})
      for (ImageLayout layout : {ImageLayout::NCHW, ImageLayout::NHWC})
        for (bool training : {true, false}) {
          if (dev.is_cuda() && act == DType::F64) continue;
          const DType par = act == DType::F64 ? DType::F64 : DType::F32;
          SCOPED_TRACE(std::string(dev.is_cuda() ? "cuda " : "cpu ") + dtype_name(act) +
                       (layout == ImageLayout::NHWC ? " nhwc" : " nchw") + (training ? " train" : " eval"));
          const Outcome fused = run(dev, act, par, layout, training, true, true);
          const Outcome apart = run(dev, act, par, layout, training, false, true);
          ASSERT_EQ(fused.values.size(), 7u);
          for (size_t k = 0; k < fused.values.size(); ++k) EXPECT_EQ(fused.values[k], apart.values[k]) << names[k];
          size_t zeros = 0;
          for (double v : fused.values[0]) zeros += v == 0;
          EXPECT_GT(zeros, 20u);
        }
}

TEST(BatchNormRelu, AResidualOfAnotherShapeIsRefusedInOneLine) {
  Tensor x = zeros({2, 3, 4, 4}, DType::F32), r = zeros({2, 3, 4, 5}, DType::F32);
  Tensor w = ones({3}, DType::F32), b = zeros({3}, DType::F32), rm = zeros({3}, DType::F32), rv = ones({3}, DType::F32);
  try {
    batch_norm_add_relu(x, r, w, b, rm, rv, Tensor(), true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("batch_norm_add_relu: the residual is a f32 [2, 3, 4, 5]"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// The fused op keeps the norm's input and its output (relu's saved tensor) and never allocates
// the pre-relu output, so its peak is lower than the pair's by that tensor, less the norm's small
// channels-last scratch (live at the fused op's peak, freed before the pair's relu allocates).
TEST(BatchNormRelu, AllocatesLessThanThePair) {
  auto peak_of = [](bool fused) {
    Generator gen(3);
    Tensor x = randn({4, 16, 16, 8}, gen, 1.0f, DType::F32).set_requires_grad(true);
    Tensor w = ones({8}, DType::F32).set_requires_grad(true), b = zeros({8}, DType::F32).set_requires_grad(true);
    Tensor rm = zeros({8}, DType::F32), rv = ones({8}, DType::F32);
    auto& a = allocator_for(Device::cpu());
    a.reset_peak_stats();
    const int64_t before = a.stats().allocated_bytes.current;
    Tensor y = fused ? batch_norm_relu(x, w, b, rm, rv, Tensor(), true, 0.1, 1e-5, ImageLayout::NHWC)
                     : relu(batch_norm(x, w, b, rm, rv, Tensor(), true, 0.1, 1e-5, ImageLayout::NHWC));
    return a.stats().allocated_bytes.peak - before;
  };
  const int64_t act_bytes = 4 * 16 * 16 * 8 * 4, saved = peak_of(false) - peak_of(true);
  EXPECT_LE(saved, act_bytes);
  EXPECT_GT(saved, act_bytes - 1024);  // the scratch: f32 [2, 4, 8], one 512-byte block
}
