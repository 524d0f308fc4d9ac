// Block gather and its adjoint (BigBird's block-sparse attention, backend_ops.def).
//
// gather_blocks: one thread per unit of out, a unit being 16 bytes when rows allow it (W bytes,
// x's strides and both pointers 16-byte aligned), else one element, moved as raw bytes. So one
// kernel per unit size serves every dtype.
//
// scatter_add_blocks: one thread per destination (b, k, r, chunk of W) walks the CSR inverse
// list of block k in order, sums in f32 registers and adds to dx once: each element of dx has
// one owner, so no atomics and the same bits every run (and the CPU's order).
//
// The table and its inverse are built by the front-end and are not checked here (that would
// need a copy to the host); an entry out of range reads as a zero block (gather) or is skipped
// (scatter), never out of bounds.
#include <algorithm>

#include "backend/blocks_check.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;
using namespace cuda::rk;

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t units) { return unsigned(std::min<int64_t>((units + kThreads - 1) / kThreads, 1 << 20)); }

// Sizes in units of U (an element, or a 16-byte chunk).
struct GatherArgs {
  int64_t total, wu, bs, slots, n, sb, st;  // slots: R * L table entries
};

template <class U>
__global__ void gather_blocks_kernel(U* __restrict__ out, const U* __restrict__ x, const int32_t* __restrict__ table,
                                     GatherArgs a) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / a.wu;
    const int64_t w = i - q * a.wu;
    const int64_t r = q % a.bs;
    q /= a.bs;
    const int64_t slot = q % a.slots, b = q / a.slots;
    const int64_t src = table[slot];
    out[i] = (src >= 0 && src < a.n) ? x[b * a.sb + (src * a.bs + r) * a.st + w] : U{};
  }
}

template <class U> void launch_gather(char* out, const char* x, const int32_t* table, GatherArgs a) {
  gather_blocks_kernel<U><<<grid_for(a.total), kThreads, 0, current_stream()>>>(
      reinterpret_cast<U*>(out), reinterpret_cast<const U*>(x), table, a);
  LT_CUDA_LAUNCH_CHECK("gather_blocks_kernel");
}

struct ScatterArgs {
  int64_t B, n, slots, bs, W, sb, st, entries;  // slots: R * L; entries: the length of the inverse list
};

// P consecutive elements of W per thread (a 16-byte pack when aligned, else 1).
template <class T, int P>
__global__ void scatter_add_blocks_kernel(T* __restrict__ dx, const T* __restrict__ dout,
                                          const int32_t* __restrict__ off, const int32_t* __restrict__ ent,
                                          ScatterArgs a) {
  const int64_t wp = a.W / P, total = a.B * a.n * a.bs * wp, block = a.bs * a.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t q = i / wp;
    const int64_t w = (i - q * wp) * P;
    const int64_t r = q % a.bs;
    q /= a.bs;
    const int64_t k = q % a.n, b = q / a.n;
    const int64_t e0 = max(int64_t(off[k]), int64_t(0)), e1 = min(int64_t(off[k + 1]), a.entries);
    if (e0 >= e1) continue;  // nobody reads block k: dx keeps its bits
    float acc[P];
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j] = 0.0f;
    const T* src = dout + b * a.slots * block + r * a.W + w;
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t slot = ent[e];
      if (slot < 0 || slot >= a.slots) continue;
      float v[P];
      load_f32<T, P>(src + slot * block, v);
#pragma unroll
      for (int j = 0; j < P; ++j) acc[j] += v[j];
    }
    T* dst = dx + b * a.sb + (k * a.bs + r) * a.st + w;
    float old[P];
    load_f32<T, P>(dst, old);
#pragma unroll
    for (int j = 0; j < P; ++j) old[j] += acc[j];
    store_f32<T, P>(dst, old);
  }
}

}  // namespace

void CudaBackend::gather_blocks(const Tensor& out, const Tensor& x, const Tensor& table, int64_t bs) {
  const blocks::Dims d = blocks::check_gather(out, x, table, bs);
  if (out.numel() == 0) return;
  const int64_t esz = int64_t(dtype_size(x.dtype()));
  char* po = static_cast<char*>(out.raw_data());
  const char* px = static_cast<const char*>(x.raw_data());
  const int32_t* tab = table.data<int32_t>();
  // 16-byte units when every row start is 16-byte aligned (a multiple of 16 bytes apart).
  const bool vec = (d.W * esz) % 16 == 0 && (d.sb * esz) % 16 == 0 && (d.st * esz) % 16 == 0 && aligned16(po) &&
                   aligned16(px);
  const int64_t u = vec ? 16 : esz;
  const GatherArgs a{out.numel() * esz / u, d.W * esz / u, d.bs, d.R * d.L, d.n, d.sb * esz / u, d.st * esz / u};
  switch (u) {
    case 16: return launch_gather<uint4>(po, px, tab, a);
    case 8: return launch_gather<uint64_t>(po, px, tab, a);
    case 4: return launch_gather<uint32_t>(po, px, tab, a);
    case 2: return launch_gather<uint16_t>(po, px, tab, a);
    default: return launch_gather<uint8_t>(po, px, tab, a);
  }
}

void CudaBackend::scatter_add_blocks(const Tensor& dx, const Tensor& dout, const Tensor& inv_offsets,
                                     const Tensor& inv_entries, int64_t bs) {
  const blocks::Dims d = blocks::check_scatter(dx, dout, inv_offsets, inv_entries, bs);
  if (dx.numel() == 0) return;
  const ScatterArgs a{d.B, d.n, d.R * d.L, d.bs, d.W, d.sb, d.st, inv_entries.numel()};
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int P = kVec<T>;
    T* pdx = dx.data<T>();
    const T* pdo = dout.data<T>();
    const bool vec = d.W % P == 0 && d.sb % P == 0 && d.st % P == 0 && aligned16(pdx) && aligned16(pdo);
    const unsigned grid = grid_for(d.B * d.n * d.bs * (vec ? d.W / P : d.W));
    if (vec)
      scatter_add_blocks_kernel<T, P><<<grid, kThreads, 0, current_stream()>>>(
          pdx, pdo, inv_offsets.data<int32_t>(), inv_entries.data<int32_t>(), a);
    else
      scatter_add_blocks_kernel<T, 1><<<grid, kThreads, 0, current_stream()>>>(
          pdx, pdo, inv_offsets.data<int32_t>(), inv_entries.data<int32_t>(), a);
    LT_CUDA_LAUNCH_CHECK("scatter_add_blocks_kernel");
  });
}

}  // namespace lt
