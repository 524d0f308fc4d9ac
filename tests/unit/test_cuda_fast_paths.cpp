// The GPU's fast paths at the sizes of a GPT-2 124M step (B16 x T1024: 16384 rows), against the
// CPU backend on the same inputs, and run twice for bitwise determinism: the bias-gradient column
// sums, the 16-byte elementwise kernels (GELU forward and backward, residual adds), the
// f32 <-> 16-bit casts of mixed precision, LayerNorm's dw/db and the GELU GEMM epilogue. Small
// and odd sizes are in test_ops_backends.cpp. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "leantrain/autograd.h"
#include "leantrain/ops.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

using test::rel_error;

double tolerance(DType dt) { return dt == DType::F32 ? 1e-5 : 1e-2; }

Tensor random(const Shape& s, DType dt, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen, 1.0f, dt);
}

// fn on the CPU and (twice) on the GPU with the same inputs: the GPU within the dtype's tolerance
// of the CPU, and its two runs bitwise equal.
void expect_matches_cpu(const std::vector<Tensor>& cpu_inputs, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                        DType dt) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) gpu_inputs.push_back(t.to(Device::cuda()));
  const std::vector<float> ref = fn(cpu_inputs).to_float_vector();
  const std::vector<float> got = fn(gpu_inputs).to_float_vector();
  const std::vector<float> again = fn(gpu_inputs).to_float_vector();
  EXPECT_LE(rel_error(got, ref), tolerance(dt));
  EXPECT_TRUE(got == again) << "two GPU runs differ";
}

class CudaFastPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  }
};

}  // namespace

// Bias gradients of GPT-2's four linears (N = 768, 2304, 3072) and an odd width.
TEST_F(CudaFastPaths, ColumnSumsAtGpt2Shapes) {
  for (DType dt : {DType::BF16, DType::F32}) {
    for (int64_t cols : {768, 2304, 3072, 50257}) {
      const int64_t rows = cols == 50257 ? 64 : 16384;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
      expect_matches_cpu({random({rows, cols}, dt, 1)}, [](const std::vector<Tensor>& x) { return sum(x[0], {0}); },
                         dt);
    }
  }
}

// Products whose m (rows of the output) is not a multiple of 8 run as an aligned bulk and a short
// tail (the tied head's weight gradient: m = 50257 vocabulary rows): a stored transposed (the
// weight gradient's dlogits^T) and not, with and without a bias, against the CPU.
TEST_F(CudaFastPaths, UnalignedRowsSplitIntoBulkAndTail) {
  for (DType dt : {DType::BF16, DType::F32}) {
    for (int64_t m : {1001, 263}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " m = " + std::to_string(m));
      expect_matches_cpu({random({512, m}, dt, 6), random({512, 96}, dt, 7)},
                         [](const std::vector<Tensor>& x) { return matmul(x[0], x[1], true, false); }, dt);
      expect_matches_cpu({random({m, 128}, dt, 8), random({96, 128}, dt, 9), random({96}, dt, 10)},
                         [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); }, dt);
    }
  }
}

// GELU (tanh, GPT-2's) forward and backward over a [4096, 3072] MLP activation, and the residual
// add of [16384, 768], on the packed kernels.
TEST_F(CudaFastPaths, GeluAndResidualAddAtGpt2Shapes) {
  for (DType dt : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_matches_cpu({random({4096, 3072}, dt, 2), random({4096, 3072}, dt, 3)},
                       [](const std::vector<Tensor>& x) {
                         Tensor h = x[0].detach();
                         h.set_requires_grad(true);
                         Tensor y = gelu(h, GeluApprox::Tanh);
                         y.backward(x[1]);
                         return concat({reshape(y, {-1}), reshape(h.grad(), {-1})}, 0);
                       },
                       dt);
    expect_matches_cpu({random({16384, 768}, dt, 4), random({16384, 768}, dt, 5)},
                       [](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, dt);
  }
}

// Mixed precision's casts: a GPT-2 table (wte, 50257 x 768) and an odd-sized tensor to 16 bits
// and back. A cast rounds once, so the GPU's bits must be the CPU's.
TEST_F(CudaFastPaths, CastsAreBitwiseTheCpus) {
  for (int64_t n : {int64_t(50257) * 768, int64_t(1001)}) {
    Tensor w = random({n}, DType::F32, 6);
    Tensor wg = w.to(Device::cuda());
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n " + std::to_string(n));
      Tensor down = cast(w, dt), down_gpu = cast(wg, dt);
      EXPECT_TRUE(down_gpu.to(Device::cpu()).to_float_vector() == down.to_float_vector());
      EXPECT_TRUE(cast(down_gpu, DType::F32).to_float_vector() == cast(down, DType::F32).to_float_vector());
      const DType other = dt == DType::BF16 ? DType::F16 : DType::BF16;
      EXPECT_TRUE(cast(down_gpu, other).to_float_vector() == cast(down, other).to_float_vector());
    }
  }
}

// LayerNorm's weight and bias gradients over GPT-2's 16384 rows of 768 (the packed column sums).
TEST_F(CudaFastPaths, LayerNormParameterGradientsAtGpt2Shapes) {
  for (DType dt : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_matches_cpu({random({16384, 768}, dt, 7), random({768}, dt, 8), random({768}, dt, 9),
                        random({16384, 768}, dt, 10)},
                       [](const std::vector<Tensor>& x) {
                         Tensor w = x[1].detach(), b = x[2].detach();
                         w.set_requires_grad(true);
                         b.set_requires_grad(true);
                         layer_norm(x[0], w, b).backward(x[3]);
                         return concat({w.grad(), b.grad()}, 0);
                       },
                       dt);
  }
}

// GPT-2's c_fc + GELU as one GEMM with cuBLASLt's GELU_AUX epilogue ([4096, 768] @ [768, 3072]
// Conv1D layout, bias), forward and the gradients through the saved pre-activation.
TEST_F(CudaFastPaths, LinearGeluEpilogueAtGpt2Shapes) {
  for (DType dt : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_matches_cpu({random({4096, 768}, dt, 11), scale(random({768, 3072}, dt, 12), 0.036),
                        random({3072}, dt, 13), random({4096, 3072}, dt, 14)},
                       [](const std::vector<Tensor>& in) {
                         Tensor x = in[0].detach(), w = in[1].detach(), b = in[2].detach();
                         for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
                         Tensor y = linear_gelu(x, w, b, true);
                         y.backward(in[3]);
                         return concat({reshape(y, {-1}), reshape(x.grad(), {-1}), reshape(w.grad(), {-1}), b.grad()}, 0);
                       },
                       dt);
  }
}
