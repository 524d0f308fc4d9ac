// CUDA products whose operands span more than 2^31 elements (GPT-2's logits for 64 x 1024
// tokens): cuBLASLt faults on them, so the backend runs them as blocks of rows or of k
// (gemm.cu, split_large). The rows beyond 2^31 elements must equal the same rows computed alone.
#include <gtest/gtest.h>

#include "leantrain/ops.h"
#include "leantrain/random.h"

namespace lt {
namespace {

constexpr int64_t kOver = (int64_t(1) << 31) + 4096;  // just past what one cuBLASLt call addresses

float max_abs_diff(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = cast(x, DType::F32).to(Device::cpu()).to_float_vector();
  const std::vector<float> b = cast(y, DType::F32).to(Device::cpu()).to_float_vector();
  float worst = a.size() == b.size() ? 0.0f : 1e30f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(GemmLarge, OutputPast2To31ElementsRunsInRowBlocks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device d = Device::cuda(0);
  const int64_t N = 32771, K = 64, M = kOver / N + 1;  // an odd row length, as GPT-2's vocabulary
  Generator g(7);
  Tensor a = randn({M, K}, g, 1.0f, DType::BF16, d), b = randn({K, N}, g, 1.0f, DType::BF16, d);
  Tensor c = matmul(a, b);  // [M, N]: more than 2^31 elements
  ASSERT_GT(c.numel(), (int64_t(1) << 31));
  Tensor last = matmul(slice(a, 0, M - 3, M), b);  // the last rows, computed alone
  EXPECT_EQ(max_abs_diff(slice(c, 0, M - 3, M), last), 0.0f);
  Tensor first = matmul(slice(a, 0, 0, 3), b);
  EXPECT_EQ(max_abs_diff(slice(c, 0, 0, 3), first), 0.0f);
}

TEST(GemmLarge, TransposedOperandPast2To31ElementsRunsInBlocksOfK) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device d = Device::cuda(0);
  // A weight gradient's shape: x^T @ dy with x [K, M] and K * M > 2^31.
  const int64_t M = 32771, N = 16, K = kOver / M + 1;
  Generator g(11);
  Tensor x = ones({K, M}, DType::BF16, d);
  Tensor dy = randn({K, N}, g, 1.0f, DType::F32, d);
  Tensor dy16 = cast(dy, DType::BF16);
  Tensor w = matmul(x, dy16, /*trans_a=*/true);  // [M, N]: every row is the column sums of dy
  ASSERT_EQ(w.shape(), Shape({M, N}));
  Tensor col = sum(cast(dy16, DType::F32), {0});  // [N]
  const std::vector<float> want = col.to(Device::cpu()).to_float_vector();
  const std::vector<float> got = cast(slice(w, 0, M - 2, M), DType::F32).to(Device::cpu()).to_float_vector();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i % size_t(N)], 0.02f * (1.0f + std::abs(want[i % size_t(N)]))) << i;  // bf16 output
}

}  // namespace
}  // namespace lt
