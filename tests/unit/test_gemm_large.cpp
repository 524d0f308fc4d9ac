// CUDA products whose operands span more than 2^31 elements (GPT-2's logits for 64 x 1024
// tokens): cuBLASLt faults on them, so the backend runs them as blocks of rows or of k
// (gemm.cu, split_large). The rows beyond 2^31 elements must equal the same rows computed alone,
// to bf16 rounding.
#include <gtest/gtest.h>

#include "leantrain/ops.h"
#include "leantrain/random.h"

namespace lt {
namespace {

constexpr int64_t kOver = (int64_t(1) << 31) + 4096;  // just past what one cuBLASLt call addresses

// Largest |x - y| / (1 + |y|). cuBLASLt picks another kernel for another m, so the same row may
// round differently in its last bf16 bit (seen on an H200: 2^-5 at values near 8): a row block at
// the wrong offset would differ by the whole value instead.
float max_rel_diff(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = cast(x, DType::F32).to(Device::cpu()).to_float_vector();
  const std::vector<float> b = cast(y, DType::F32).to(Device::cpu()).to_float_vector();
  float worst = a.size() == b.size() ? 0.0f : 1e30f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0f + std::abs(b[i])));
  return worst;
}

constexpr float kBf16Rounding = 1.0f / 128;  // two of bf16's last bits

TEST(GemmLarge, OutputPast2To31ElementsRunsInRowBlocks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device d = Device::cuda(0);
  const int64_t N = 32771, K = 64, M = kOver / N + 1;  // an odd row length, as GPT-2's vocabulary
  Generator g(7);
  Tensor a = randn({M, K}, g, 1.0f, DType::BF16, d), b = randn({K, N}, g, 1.0f, DType::BF16, d);
  Tensor c = matmul(a, b);  // [M, N]: more than 2^31 elements
  ASSERT_GT(c.numel(), (int64_t(1) << 31));
  Tensor last = matmul(slice(a, 0, M - 3, M), b);  // the last rows, computed alone
  EXPECT_LE(max_rel_diff(slice(c, 0, M - 3, M), last), kBf16Rounding);
  Tensor first = matmul(slice(a, 0, 0, 3), b);
  EXPECT_LE(max_rel_diff(slice(c, 0, 0, 3), first), kBf16Rounding);
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
