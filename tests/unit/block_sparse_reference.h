// The attention a block table allows, as a dense additive score bias for reference computations
// written with plain ops (test_block_sparse_attention.cpp, test_encoder_models.cpp).
#pragma once
#include <cmath>
#include <vector>

#include "leantrain/ops.h"

namespace lt::test {

// [B, 1, T, T]: log(how many times query i's row of `table` lists key j's block) where key j is
// not masked, -1e30 where that is zero; the first and last query blocks list every block once.
inline Tensor listed_bias(const std::vector<int32_t>& table, int64_t n, int64_t bs, const std::vector<int64_t>& mask, int64_t B) {
  const int64_t T = n * bs, L = int64_t(table.size()) / n;
  std::vector<double> bias(size_t(B * T * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t qb = 0; qb < n; ++qb) {
      std::vector<int> count(size_t(n), 0);
      if (qb == 0 || qb == n - 1) {
        std::fill(count.begin(), count.end(), 1);
      } else {
        for (int64_t s = 0; s < L; ++s)
          if (int32_t k = table[size_t(qb * L + s)]; k >= 0) ++count[size_t(k)];
      }
      for (int64_t i = qb * bs; i < (qb + 1) * bs; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const int c = count[size_t(j / bs)];
          bias[size_t((b * T + i) * T + j)] = c > 0 && mask[size_t(b * T + j)] ? std::log(double(c)) : -1e30;
        }
    }
  return from_vector(bias, {B, 1, T, T});
}

}  // namespace lt::test
