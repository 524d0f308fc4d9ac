// BigBird's block-sparse attention core (leantrain/nn_encoder.h): the block table of each call,
// then lt::block_sparse_attention_packed.
#include <algorithm>
#include <numeric>

#include "leantrain/error.h"
#include "leantrain/nn_encoder.h"
#include "leantrain/ops.h"

namespace lt::nn {

BlockSparseAttentionCore::BlockSparseAttentionCore(int64_t dim, int64_t heads, const BlockSparseOptions& o,
                                                   uint64_t seed)
    : AttentionCore(dim, heads, /*causal=*/false), o_(o), gen_(seed) {
  LT_CHECK(o.block_size > 0 && o.random_blocks >= 0,
           "block-sparse attention: block_size " + std::to_string(o.block_size) + ", num_random_blocks " +
               std::to_string(o.random_blocks),
           "blocks hold at least one position and the random block count is not negative", "fix the config");
}

// Row i lists: block 0 (global), the window i-1, i, i+1, the random blocks, the last block
// (global); the second and the second-to-last rows have the globals inside their windows, so
// they list one block less (-1 fills the slot). Rows 0 and n-1 attend to everything and are
// not read from the table.
std::vector<int32_t> BlockSparseAttentionCore::block_table(int64_t n, bool draw) const {
  const int64_t r = o_.random_blocks, L = 5 + r;
  std::vector<int32_t> t(size_t(n * L), -1);
  const uint64_t base = draw ? gen_.take(uint64_t(n * std::max<int64_t>(r, 1))) : 0;
  std::vector<int32_t> pool;
  for (int64_t i = 1; i + 1 < n; ++i) {
    int32_t* row = t.data() + i * L;
    int64_t s = 0;
    row[s++] = 0;
    for (int64_t k = std::max<int64_t>(i - 1, 1); k <= std::min(i + 1, n - 2); ++k) row[s++] = int32_t(k);
    if (draw) {
      // r distinct blocks among the middle ones outside the window, by a partial Fisher-Yates
      // shuffle whose j-th swap reads counter base + i * r + j.
      pool.clear();
      for (int64_t k = 1; k + 1 < n; ++k)
        if (k < i - 1 || k > i + 1) pool.push_back(int32_t(k));
      for (int64_t j = 0; j < r && j < int64_t(pool.size()); ++j) {
        const float u = rng_uniform(gen_.seed, base + uint64_t(i * r + j));
        const int64_t pick = j + std::min<int64_t>(int64_t(u * float(int64_t(pool.size()) - j)), int64_t(pool.size()) - j - 1);
        std::swap(pool[size_t(j)], pool[size_t(pick)]);
        row[s++] = pool[size_t(j)];
      }
    } else {
      for (int64_t j = 0; j < r; ++j) row[s++] = 0;  // transformers' eval mode: every random block is block 0
    }
    row[s++] = int32_t(n - 1);
  }
  return t;
}

Tensor BlockSparseAttentionCore::forward(const Tensor& qkv, const TokenMask& mask) const {
  LT_CHECK(qkv.dim() == 3, "block-sparse attention: input must be [B, T, 3C]",
           "the fused projection has shape " + shape_str(qkv.shape()), "pass a batch of sequences");
  LT_CHECK(!mask.doc_pos.defined(), "block-sparse attention: packed documents",
           "BigBird's encoder attends across the whole row; documents are packed for causal language models",
           "pass one text per row");
  const int64_t T = qkv.size(1);
  if (!sparse_at(T)) return AttentionCore::forward(qkv, mask);
  LT_CHECK(T % o_.block_size == 0,
           "block-sparse attention: " + std::to_string(T) + " positions in blocks of " + std::to_string(o_.block_size),
           "the sequence must be a whole number of blocks", "pad the batch to a multiple of block_size (the model does)");
  return block_sparse_attention_packed(qkv, heads_, o_.block_size, block_table(T / o_.block_size, is_training()),
                                       mask.key_padding);
}

double BlockSparseAttentionCore::forward_flops(const Shape& qkv) const {
  if (qkv.size() != 3) return 0;
  const int64_t T = qkv[1];
  if (!sparse_at(T)) return AttentionCore::forward_flops(qkv);
  // Two global query blocks over all T keys, the rest over 5 + r blocks (4 + r for two of them).
  const double b = double(qkv[0]), c = double(heads_ * head_dim_), bs = double(o_.block_size);
  const double n = double(T) / bs, keys = 2 * bs * double(T) + (n - 2) * bs * (5 + double(o_.random_blocks)) * bs - 2 * bs * bs;
  return 4 * b * keys * c;
}

}  // namespace lt::nn
