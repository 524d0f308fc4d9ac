// Block gather and its adjoint on the CPU (BigBird's block-sparse attention, backend_ops.def).
// gather_blocks copies raw bytes, row by row, so every dtype goes through one loop.
// scatter_add_blocks walks the CSR inverse of the table: for each destination block the listed
// source blocks are summed in the accumulation type in list order and added to dx once, so the
// result does not depend on how the work is split (the CUDA kernel sums in the same order).
// Unlike the CUDA kernels, these read the table and its inverse on the host and refuse entries
// out of range.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/blocks_check.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

void check_table_values(const Tensor& table, int64_t n) {
  const int32_t* t = table.data<int32_t>();
  for (int64_t e = 0; e < table.numel(); ++e)
    LT_CHECK(t[e] >= -1 && t[e] < n,
             "gather_blocks: table entry " + std::to_string(e) + " is " + std::to_string(t[e]) + ", not in [-1, " +
                 std::to_string(n) + ")",
             "entries name a block of x, or -1 for a block of zeros", "");
}

// Offsets non-decreasing from 0 up to the entry count; entries name a table slot i * L + s.
void check_inverse_values(const Tensor& inv_offsets, const Tensor& inv_entries, int64_t slots) {
  const int32_t* off = inv_offsets.data<int32_t>();
  const int64_t n = inv_offsets.numel() - 1;
  bool ok = off[0] == 0 && off[n] == inv_entries.numel();
  for (int64_t k = 0; ok && k < n; ++k) ok = off[k] <= off[k + 1];
  LT_CHECK(ok,
           "scatter_add_blocks: inv_offsets do not rise from 0 to the " + std::to_string(inv_entries.numel()) +
               " inverse entries",
           "they are the CSR offsets of the table's inverse", "");
  const int32_t* ent = inv_entries.data<int32_t>();
  for (int64_t e = 0; e < inv_entries.numel(); ++e)
    LT_CHECK(ent[e] >= 0 && ent[e] < slots,
             "scatter_add_blocks: inverse entry " + std::to_string(e) + " is " + std::to_string(ent[e]) +
                 ", not in [0, " + std::to_string(slots) + ")",
             "entries name a table slot i * L + s", "");
}

}  // namespace

void CpuBackend::gather_blocks(const Tensor& out, const Tensor& x, const Tensor& table, int64_t bs) {
  const blocks::Dims d = blocks::check_gather(out, x, table, bs);
  check_table_values(table, d.n);
  const size_t esz = dtype_size(x.dtype()), row_bytes = size_t(d.W) * esz;
  const int32_t* tab = table.data<int32_t>();
  const char* px = static_cast<const char*>(x.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t slot = 0; slot < d.R * d.L; ++slot) {
      const int64_t src = tab[slot];
      for (int64_t r = 0; r < d.bs; ++r, po += row_bytes) {
        if (src < 0) {
          std::memset(po, 0, row_bytes);  // all-zero bytes are 0 in every dtype
          continue;
        }
        const int64_t off = b * d.sb + (src * d.bs + r) * d.st;
        std::memcpy(po, px + off * int64_t(esz), row_bytes);
      }
    }
}

void CpuBackend::scatter_add_blocks(const Tensor& dx, const Tensor& dout, const Tensor& inv_offsets,
                                    const Tensor& inv_entries, int64_t bs) {
  const blocks::Dims d = blocks::check_scatter(dx, dout, inv_offsets, inv_entries, bs);
  check_inverse_values(inv_offsets, inv_entries, d.R * d.L);
  const int32_t* off = inv_offsets.data<int32_t>();
  const int32_t* ent = inv_entries.data<int32_t>();
  const int64_t block = d.bs * d.W;  // elements of one [bs, W] block of dout
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* pdx = dx.data<T>();
    const T* g = dout.data<T>();
    std::vector<A> acc(static_cast<size_t>(block));
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t k = 0; k < d.n; ++k) {
        if (off[k] == off[k + 1]) continue;  // nobody reads block k: dx keeps its bits
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t e = off[k]; e < off[k + 1]; ++e) {
          const T* src = g + (b * d.R * d.L + ent[e]) * block;  // slot i * L + s of batch b
          for (int64_t j = 0; j < block; ++j) acc[size_t(j)] += ld(src, j);
        }
        for (int64_t r = 0; r < d.bs; ++r) {
          const int64_t row = b * d.sb + (k * d.bs + r) * d.st;
          for (int64_t w = 0; w < d.W; ++w) st(pdx, row + w, ld(pdx, row + w) + acc[size_t(r * d.W + w)]);
        }
      }
  });
}

}  // namespace lt
