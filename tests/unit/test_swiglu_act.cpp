// swiglu_bwd's optional activation output: the backward of swiglu_linear reads the gate | up
// buffer and the activation's gradient, and writes the activation (silu(gate) * up) the down
// projection's weight gradient needs, where that gradient was (the buffer it has just read), so
// no kernel recomputes it. The activation must be swiglu_fwd's bits, and the gradients the bits
// of the call without it, on every path: a separate buffer and the aliased one, the 16-byte
// packed kernel and the per-element one (an odd width), SiLU and the gated GELU, each dtype.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "ops/op_common.h"
#include "unit/tensor_bytes.h"

using namespace lt;

namespace {

using test::bytes_of;

void check_activation_output(Device dev, DType dt, int64_t n, int64_t f, bool gelu) {
  const std::string what = std::string(dev.is_cuda() ? "cuda " : "cpu ") + dtype_name(dt) + " n=" +
                           std::to_string(n) + " f=" + std::to_string(f) + (gelu ? " gelu" : " silu");
  Generator gen(11);
  Tensor gu = randn({n, 2 * f}, gen, 2.0f, DType::F32).to(dt).to(dev);
  Tensor dout = randn({n, f}, gen, 1.0f, DType::F32).to(dt).to(dev);
  Tensor gate = detail::column_view(gu, f, 0), up = detail::column_view(gu, f, f);
  Backend& be = detail::backend_of(gu);

  Tensor want_act = Tensor::empty({n, f}, dt, dev);
  be.swiglu_fwd(want_act, gate, up, gelu);
  Tensor want_d = Tensor::empty({n, 2 * f}, dt, dev);
  be.swiglu_bwd(detail::column_view(want_d, f, 0), detail::column_view(want_d, f, f), dout, gate, up, gelu, Tensor());

  // A buffer of its own.
  Tensor act = Tensor::empty({n, f}, dt, dev), d1 = Tensor::empty({n, 2 * f}, dt, dev);
  be.swiglu_bwd(detail::column_view(d1, f, 0), detail::column_view(d1, f, f), dout, gate, up, gelu, act);
  EXPECT_EQ(bytes_of(act), bytes_of(want_act)) << what << ": the activation, own buffer";
  EXPECT_EQ(bytes_of(d1), bytes_of(want_d)) << what << ": the gradients, own buffer";

  // The activation written over the gradient it came from.
  Tensor alias = contiguous(dout.to(Device::cpu()).to(dev)), d2 = Tensor::empty({n, 2 * f}, dt, dev);
  be.swiglu_bwd(detail::column_view(d2, f, 0), detail::column_view(d2, f, f), alias, gate, up, gelu, alias);
  EXPECT_EQ(bytes_of(alias), bytes_of(want_act)) << what << ": the activation over dout";
  EXPECT_EQ(bytes_of(d2), bytes_of(want_d)) << what << ": the gradients, aliased";
}

void check_all(Device dev) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (bool gelu : {false, true}) {
      check_activation_output(dev, dt, 7, 24, gelu);   // packed rows (16-byte multiples in bf16 and f16)
      check_activation_output(dev, dt, 5, 13, gelu);   // an odd width: the per-element kernel
      check_activation_output(dev, dt, 1, 1000, gelu);  // one row
    }
}

TEST(SwigluActivation, CpuBackwardWritesTheForwardsBitsAndTheSameGradients) {
  check_all(Device::cpu());
  check_activation_output(Device::cpu(), DType::F64, 4, 9, false);
}

TEST(SwigluActivation, CudaBackwardWritesTheForwardsBitsAndTheSameGradients) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  check_all(Device::cuda(0));
}

// The op: swiglu_linear's gradients are those of swiglu_packed then linear (which keep the
// activation), for every subset of inputs that asks for a gradient.
TEST(SwigluActivation, SwigluLinearGradientsEqualTheUnfusedOps) {
  for (int mask = 1; mask < 4; ++mask) {
    const bool gx = mask & 1, gw = mask & 2;
    Generator gen(5 + mask);
    Tensor x0 = randn({3, 4, 2 * 16}, gen, 1.5f, DType::F32).to(DType::BF16);
    Tensor w0 = randn({8, 16}, gen, 0.3f, DType::F32).to(DType::BF16);
    Tensor r = randn({3, 4, 8}, gen, 1.0f, DType::F32).to(DType::BF16);
    auto run = [&](bool fused) {
      Tensor x = x0.detach().clone().set_requires_grad(gx), w = w0.detach().clone().set_requires_grad(gw);
      Tensor y = fused ? swiglu_linear(x, w, Tensor()) : linear(swiglu_packed(x), w, Tensor());
      sum_all(mul(y, r)).backward();
      return std::vector<std::vector<uint8_t>>{bytes_of(y), gx ? bytes_of(x.grad()) : std::vector<uint8_t>{},
                                               gw ? bytes_of(w.grad()) : std::vector<uint8_t>{}};
    };
    EXPECT_EQ(run(true), run(false)) << "x grad " << gx << ", w grad " << gw;
  }
}

}  // namespace
