// Column sums on the GPU (the bias gradient's reduce_sum over the rows): with
// LEANTRAIN_REDUCE_COLS_SPLIT=1 (tests/gpu/run_gpu_checks.sh reruns these so) tall matrices whose
// columns alone fill few blocks take two passes through the borrowed cuBLASLt workspace
// (reduce_cols_part_kernel, reduce_cols_sum_kernel); the rest, unaligned widths, and every
// matrix without the switch take the one-pass kernel. Every case against the CPU backend and
// twice on the GPU for bitwise determinism: GPT-2's bias-gradient shapes, rows that leave the
// last part short, widths that leave a block's last packs idle or are not a whole number of
// 16-byte packs, few rows, and 16-bit into f32 (autocast's bias gradients) as well as same-dtype
// sums. Also the bias gradient of a linear through autograd, whichever path gemm_bgrad takes.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "unit/cuda_workspace.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

std::vector<float> column_sums_on(Device dev, const Tensor& x_cpu, DType out_dt) {
  const Tensor x = x_cpu.to(dev);
  Tensor out = Tensor::empty({1, x.size(1)}, out_dt, dev);
  backend_for(dev).reduce_sum(out, x);
  return out.to(Device::cpu()).to_float_vector();
}

class ReduceColsSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
    ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  }

  static void check(int64_t rows, int64_t cols, DType in_dt, DType out_dt) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " + dtype_name(in_dt) + " -> " +
                 dtype_name(out_dt));
    Generator g(500 + uint64_t(rows) * 3 + uint64_t(cols));
    // A mean away from zero, so a lost or doubled row shows against the sum's size.
    const Tensor x = add_scalar(randn({rows, cols}, g, 1.0f, DType::F32), 0.25).to(in_dt);
    const std::vector<float> ref = column_sums_on(Device::cpu(), x, out_dt);
    const std::vector<float> got = column_sums_on(Device::cuda(), x, out_dt);
    const std::vector<float> again = column_sums_on(Device::cuda(), x, out_dt);
    const double tol = out_dt == DType::F32 ? 1e-5 : 1e-2;
    EXPECT_LE(test::rel_error(got, ref), tol);
    EXPECT_TRUE(got == again) << "two GPU runs differ";
  }
};

}  // namespace

TEST_F(ReduceColsSplit, Gpt2BiasGradientShapes) {
  for (int64_t cols : {768, 2304, 3072}) {
    check(16384, cols, DType::BF16, DType::F32);
    check(16384, cols, DType::BF16, DType::BF16);
  }
  check(16384, 768, DType::F32, DType::F32);
  check(16384, 768, DType::F16, DType::F32);
}

TEST_F(ReduceColsSplit, ShortLastPartIdlePacksAndUnalignedWidths) {
  // 4099 rows: the parts do not divide them; 776 and 264: a block's last packs have no columns;
  // 770: not a whole number of 16-byte packs (the one-pass kernel); 36: one block of packs.
  for (int64_t cols : {776, 264, 770, 36}) {
    check(4099, cols, DType::BF16, DType::F32);
    check(4099, cols, DType::F32, DType::F32);
  }
}

TEST_F(ReduceColsSplit, FewRows) {
  // Under 64 rows there are not two parts of 32: the one-pass kernel; 64 and 95 rows: two parts.
  for (int64_t rows : {1, 31, 64, 95}) check(rows, 768, DType::BF16, DType::F32);
}

TEST_F(ReduceColsSplit, LinearBiasGradientUnderAutocast) {
  // GPT-2's MLP width: the bias gradient of a bf16 linear with f32 parameters, against the CPU.
  auto run = [](Device dev) {
    Generator g(77);
    Tensor x = randn({2048, 768}, g, 1.0f, DType::BF16).to(dev);
    Tensor w = randn({3072, 768}, g, 0.02f, DType::F32).to(dev).detach();
    Tensor b = randn({3072}, g, 0.02f, DType::F32).to(dev).detach();
    b.set_requires_grad(true);
    w.set_requires_grad(true);
    const Tensor gy = randn({2048, 3072}, g, 1.0f, DType::BF16).to(dev);
    {
      AutocastGuard ac(DType::BF16);
      sum_all(mul(linear(x, autocast_like(w, x), autocast_like(b, x)), gy)).backward();
    }
    return b.grad().to(Device::cpu()).to_float_vector();
  };
  const std::vector<float> ref = run(Device::cpu()), got = run(Device::cuda()), again = run(Device::cuda());
  EXPECT_LE(test::rel_error(got, ref), 1e-2);
  EXPECT_TRUE(got == again) << "two GPU runs differ";
}
