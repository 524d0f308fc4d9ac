// lt::block_sparse_attention_packed and BigBird's block tables (nn::BlockSparseAttentionCore):
// the output and qkv gradient equal a dense reference written with plain ops, whose scores get
// log(how many times the key is listed) added (a block listed twice weighs twice, -inf where it
// is not listed or padded), in f64; gradcheck; the tables' shape in eval and training mode, their
// draws reproducible from the generator; one-line errors; and, where a GPU answers, CUDA (f32 and
// bf16) against the CPU in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_encoder.h"
#include "leantrain/ops.h"
#include "unit/block_sparse_reference.h"
#include "unit/max_abs_diff.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"

using namespace lt;

namespace {

Tensor dense_reference(const Tensor& qkv, int64_t H, const Tensor& bias) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / H;
  auto heads = [&](int64_t part) {
    return permute(reshape(slice(qkv, 2, part * C, (part + 1) * C), {B, T, H, D}), {0, 2, 1, 3});
  };
  Tensor s = add(scale(matmul(heads(0), heads(1), false, true), 1.0 / std::sqrt(double(D))), bias);
  return reshape(permute(matmul(softmax(s), heads(2)), {0, 2, 1, 3}), {B, T, C});
}

std::vector<int64_t> padded_mask(int64_t B, int64_t T) {  // row b ends in 3 b pads
  std::vector<int64_t> m(size_t(B * T), 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = T - 3 * b; t < T; ++t) m[size_t(b * T + t)] = 0;
  return m;
}

using test::max_abs_diff;

nn::BlockSparseAttentionCore core(int64_t bs, int64_t r, uint64_t seed = 7) {
  return nn::BlockSparseAttentionCore(8, 2, nn::BlockSparseOptions{bs, r}, seed);
}

}  // namespace

TEST(BlockSparseTables, EvalListsGlobalsWindowAndBlockZeroForRandom) {
  const auto c = core(4, 2);
  const int64_t n = 9, L = 7;
  const std::vector<int32_t> t = c.block_table(n, /*draw=*/false);
  ASSERT_EQ(t.size(), size_t(n * L));
  auto row = [&](int64_t i) { return std::vector<int32_t>(t.begin() + i * L, t.begin() + (i + 1) * L); };
  EXPECT_EQ(row(0), std::vector<int32_t>(7, -1));
  EXPECT_EQ(row(8), std::vector<int32_t>(7, -1));
  EXPECT_EQ(row(1), (std::vector<int32_t>{0, 1, 2, 0, 0, 8, -1}));  // transformers' q[1]: 0, 1, 2, last, random
  EXPECT_EQ(row(4), (std::vector<int32_t>{0, 3, 4, 5, 0, 0, 8}));
  EXPECT_EQ(row(7), (std::vector<int32_t>{0, 6, 7, 0, 0, 8, -1}));  // q[-2]: 0, -3, -2, -1, random
}

TEST(BlockSparseTables, TrainingDrawsDistinctBlocksOutsideTheWindowReproducibly) {
  auto c = core(4, 3);
  const int64_t n = 12, L = 8;
  c.generator().offset = 100;
  const std::vector<int32_t> a = c.block_table(n, true);
  const uint64_t after = c.generator().offset;
  EXPECT_GT(after, 100u);
  const std::vector<int32_t> b = c.block_table(n, true);
  EXPECT_NE(a, b);  // the next call draws anew
  c.generator().offset = 100;
  EXPECT_EQ(c.block_table(n, true), a);  // a rewound generator draws the same blocks (recomputation)
  std::set<std::vector<int32_t>> rows;
  for (int64_t i = 1; i + 1 < n; ++i) {
    std::set<int32_t> random;
    const int64_t window_end = (i == 1 || i == n - 2) ? 3 : 4;
    for (int64_t s = window_end; s < window_end + 3; ++s) {
      const int32_t k = a[size_t(i * L + s)];
      EXPECT_TRUE(k >= 1 && k <= n - 2 && (k < i - 1 || k > i + 1)) << "row " << i << " block " << k;
      random.insert(k);
    }
    EXPECT_EQ(random.size(), 3u) << "row " << i;
    rows.insert(std::vector<int32_t>(a.begin() + i * L + window_end, a.begin() + i * L + window_end + 3));
  }
  EXPECT_GT(rows.size(), 3u);  // not one fixed choice
}

TEST(BlockSparseAttention, MatchesTheDenseReferenceWithPaddingAndRepeatedBlocks) {
  const int64_t B = 3, n = 9, bs = 4, T = n * bs, H = 2, C = 8;
  const std::vector<int64_t> m = padded_mask(B, T);
  const Tensor mask = from_ints(m, {B, T}, DType::U8);
  for (bool draw : {false, true}) {
    SCOPED_TRACE(draw ? "random blocks" : "eval blocks (block 0 repeated)");
    auto c = core(bs, 2);
    const std::vector<int32_t> table = c.block_table(n, draw);
    Tensor qkv = test::rand64({B, T, 3 * C}, 5);
    Tensor out = block_sparse_attention_packed(qkv, H, bs, table, mask);
    Generator gen(3);
    Tensor w = randn(out.shape(), gen, 1.0f, DType::F64);
    sum_all(mul(out, w)).backward();
    Tensor ours = qkv.grad();
    qkv.set_grad(Tensor());
    Tensor ref = dense_reference(qkv, H, test::listed_bias(table, n, bs, m, B));
    EXPECT_LT(max_abs_diff(out, ref), 1e-12);
    sum_all(mul(ref, w)).backward();
    EXPECT_LT(max_abs_diff(ours, qkv.grad()), 1e-12);
  }
}

TEST(BlockSparseAttention, Gradcheck) {
  const int64_t B = 2, n = 5, bs = 2, T = n * bs;
  const auto c = core(bs, 1);
  const std::vector<int32_t> table = c.block_table(n, false);
  const Tensor mask = from_ints(padded_mask(B, T), {B, T}, DType::U8);
  EXPECT_TRUE(test::gradcheck(
      [&](const std::vector<Tensor>& in) { return block_sparse_attention_packed(in[0], 2, bs, table, mask); },
      {test::rand64({B, T, 3 * 4}, 9)}));
}

TEST(BlockSparseAttention, BadArgumentsAreOneLineErrors) {
  const Tensor qkv = zeros({1, 12, 12}, DType::F32);
  const std::vector<int32_t> ok(size_t(4 * 6), -1);
  for (const std::string& e :
       {test::error_of([&] { block_sparse_attention_packed(qkv, 2, 5, ok); }),             // 12 not whole blocks
        test::error_of([&] { block_sparse_attention_packed(qkv, 2, 3, {0, 1, 2}); }),      // 3 entries for 4 blocks
        test::error_of([&] { block_sparse_attention_packed(qkv, 2, 3, std::vector<int32_t>(24, 4)); }),  // block 4
        test::error_of([&] { block_sparse_attention_packed(qkv, 5, 3, ok); }),             // 12 = 3 * 4 not by 5 heads
        test::error_of([&] { block_sparse_attention_packed(qkv, 2, 6, ok); })}) {          // 2 blocks < 3
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// CUDA against the CPU in f64: output and qkv gradient, f32 and bf16 (the dense kernels' tensor-core
// path takes head dim 64, the SIMT path head dim 8).
TEST(BlockSparseAttention, CudaMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (int64_t D : {8, 64})
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("D " + std::to_string(D) + " " + dtype_name(dt));
      const int64_t B = 2, n = 10, bs = 16, T = n * bs, H = 2, C = H * D;
      const auto c = core(bs, 2);
      const std::vector<int32_t> table = c.block_table(n, false);
      const std::vector<int64_t> m = padded_mask(B, T);
      Tensor x = test::rand64({B, T, 3 * C}, 21);
      Generator gen(4);
      Tensor w = randn({B, T, C}, gen, 1.0f, DType::F64);
      auto run = [&](Device dev, DType t) {
        Tensor qkv = dev.is_cpu() ? cast(x.detach(), t) : to_device(cast(x.detach(), DType::F32), dev);
        if (!dev.is_cpu() && t != DType::F32) qkv = cast(qkv, t);
        qkv.set_requires_grad(true);
        Tensor out = block_sparse_attention_packed(qkv, H, bs, table, from_ints(m, {B, T}, DType::U8, dev));
        sum_all(mul(cast(out, DType::F32), to_device(cast(w, DType::F32), dev))).backward();
        return std::pair{cast(to_device(out, Device::cpu()), DType::F64), cast(to_device(qkv.grad(), Device::cpu()), DType::F64)};
      };
      auto [ref_out, ref_grad] = run(Device::cpu(), DType::F64);
      auto [out, grad] = run(Device::cuda(), dt);
      const double tol = dt == DType::F32 ? 1e-4 : 6e-2;
      EXPECT_LT(max_abs_diff(out, ref_out), tol);
      EXPECT_LT(max_abs_diff(grad, ref_grad), tol * 4);
    }
}
