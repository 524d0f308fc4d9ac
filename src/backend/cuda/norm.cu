// LayerNorm, RMSNorm and softmax over the last dim, f32 accumulation for every storage type.
//
// Row kernels: one warp per row (rows are short: C is the model width), packed 16-byte
// accesses when the row length and pointers allow, and two passes over the row (mean, then
// the centred variance) instead of sum/sum-of-squares, which cancels badly. Re-reads of the
// row hit L1. Softmax rows may be long (any length): one block per row above 1024.
//
// Fused residual add (add_layernorm / add_rmsnorm): the first pass over the row reads x and r,
// rounds x + r to the storage type, writes it to `sum` and takes the statistics of that stored
// value; the later passes re-read `sum` (the thread's own writes, L1-hot). The backward's dx
// pass adds the incoming gradient of `sum` before its one rounding. So the separate add
// kernel (forward) and the gradient-sum kernel (backward) are gone.
//
// Parameter gradients (dw, db) are column sums over all rows. Without scratch memory of its own (the
// backend never allocates) and without atomics (not deterministic), each block owns a strip
// of columns and loops over every row; its row phases are combined by a fixed-order tree in
// shared memory, so the result is bitwise reproducible. Rows of 16-byte packs (every model
// width) go 16 bytes per load, 16 columns per block; others 2 bytes, 8 columns per block. When
// the cuBLASLt workspace is held, packed rows take two passes through it instead (blocks own
// rows, then the blocks' sums are added in order): the same determinism, at bandwidth. When dx
// is wanted too (training) and rows are at most 1024 columns, the first of those passes is the
// dx kernel itself (norm_bwd_fused_kernel): x and dy are read once for all three gradients.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/row_kernels.cuh"
#include "core/knobs.h"

#include <cooperative_groups.h>

namespace lt {
using namespace cuda;
using namespace cuda::rk;
namespace cg = cooperative_groups;

namespace {

constexpr int kRowWarps = 4;       // rows (warps) per block in the row kernels
constexpr int kColStrip = 8;       // columns per block in the column-sum kernels
constexpr int kColPhases = 128;    // row phases per block in the column-sum kernels

// ---------------------------------------------------------------- LayerNorm / RMSNorm forward

// P elements of the row input at c: x itself or, with ADD, x + r rounded to T, also stored to sum.
template <class T, int P, bool ADD>
__device__ __forceinline__ void load_input(const T* __restrict__ x, const T* __restrict__ r, T* sum, int64_t i,
                                           float (&v)[P]) {
  load_f32<T, P>(x + i, v);
  if (ADD) {
    float u[P];
    load_f32<T, P>(r + i, u);
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = to_f32(from_f32<T>(v[k] + u[k]));
    store_f32<T, P>(sum + i, v);
  }
}

// RMS = true: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); mean is not written.
// w_off: added to each weight in f32 (1 for Gemma's x * (1 + w); 0 otherwise).
// ADD = true: the normalised input is sum = x + r, written by the first pass (sum is not
// __restrict__: the later passes read it back, so its loads must not take the read-only path).
template <class T, int P, bool RMS, bool ADD>
__global__ void norm_fwd_kernel(T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                const T* __restrict__ x, const T* __restrict__ r, T* sum, const T* __restrict__ w,
                                const T* __restrict__ b, int64_t N, int C, float eps, float w_off) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.y;
  if (row >= N) return;  // the whole warp leaves; there is no block barrier below
  const int lane = threadIdx.x;
  const int64_t r0 = row * C;
  const T* xr = ADD ? sum + r0 : x + r0;  // what the passes after the first read
  T* yr = y + r0;
  float mu = 0.0f;
  if (!RMS) {
    float s = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
      float v[P];
      load_input<T, P, ADD>(x, r, sum, r0 + c, v);
#pragma unroll
      for (int k = 0; k < P; ++k) s += v[k];
    }
    mu = warp_sum(s) / float(C);
  }
  float s2 = 0.0f;
  for (int c = lane * P; c < C; c += 32 * P) {
    float v[P];
    if (RMS) load_input<T, P, ADD>(x, r, sum, r0 + c, v);
    else load_f32<T, P>(xr + c, v);
#pragma unroll
    for (int k = 0; k < P; ++k) s2 += (v[k] - mu) * (v[k] - mu);
  }
  const float rs = 1.0f / sqrtf(warp_sum(s2) / float(C) + eps);
  for (int c = lane * P; c < C; c += 32 * P) {
    float v[P], wv[P], bv[P];
    load_f32<T, P>(xr + c, v);
    load_f32<T, P>(w + c, wv);
    if (b) {
      load_f32<T, P>(b + c, bv);
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) bv[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = (v[k] - mu) * rs * (wv[k] + w_off) + bv[k];
    store_f32<T, P>(yr + c, v);
  }
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

// ---------------------------------------------------------------- LayerNorm / RMSNorm backward: dx

// g = dy * w, xhat = (x - mean) * rstd (mean = 0 for RMS):
// LayerNorm dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); RMSNorm drops the mean(g) term.
// ADD: dx = ds + that (the fused add's gradient, shared by both addends), rounded once.
// A row takes two passes over its packs: the sums of g and g * xhat, then dx. Both kernels below
// make them through dx_sums_pack and dx_store_pack (row_kernels.cuh; norm_heads.cu's per-head norm
// too), so their dx is the same expression in the same order.

template <class T, int P, bool RMS, bool ADD>
__global__ void norm_bwd_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ ds,
                                   const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int64_t N, int C, float w_off) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.y;
  if (row >= N) return;
  const int lane = threadIdx.x;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const float mu = RMS ? 0.0f : mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int c = lane * P; c < C; c += 32 * P) dx_sums_pack<T, P>(xr, dyr, w, w_off, c, mu, rs, sg, sgx);
  const float mg = RMS ? 0.0f : warp_sum(sg) / float(C);
  const float mgx = warp_sum(sgx) / float(C);
  for (int c = lane * P; c < C; c += 32 * P) {
    float xv[P], gv[P];
    dx_store_pack<T, P, ADD>(dx + row * C, xr, dyr, ADD ? ds + row * C : nullptr, w, w_off, c, mu, rs, mg, mgx, xv,
                             gv);
  }
}

// norm_bwd_dx_kernel's dx and the dw/db column sums in one pass, so x and dy are read once for
// both (GPT-2's step has 25 norms; the separate column-sum pass read 50 MB each). The grid is what
// the SMs hold at once: warp g of G owns rows g, g + G, ..., computes each row's dx as
// norm_bwd_dx_kernel does (the same helpers, the same order) and adds dy * xhat and dy into its
// lanes' column sums (lane l owns packs l, l + 32, ... of P columns, at most K of them: C <= 32 *
// P * K). At the end the block's warps are added in warp order into part[block] (2C floats: dw,
// then db), and norm_bwd_dwdb_sum_kernel adds the blocks in block order: a fixed partition and a
// fixed order, so the sums are bitwise reproducible for a given grid. RMS has no bias: only the
// dw sums are kept (half the registers and shared memory, so rows up to 2048 bf16 fit) and only
// part[block][0, C) is written.
template <class T, int P, int K, bool RMS, bool ADD>
__global__ void __launch_bounds__(32 * kRowWarps)
    norm_bwd_fused_kernel(T* __restrict__ dx, float* __restrict__ part, const T* __restrict__ dy,
                          const T* __restrict__ ds, const T* __restrict__ x, const T* __restrict__ w,
                          const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N, int C,
                          float w_off) {
  extern __shared__ float fused_red[];  // [kRowWarps][kSums * C]: each warp's sums
  constexpr int kSums = RMS ? 1 : 2;
  const int lane = threadIdx.x, warp = threadIdx.y;
  float aw[K][P], ab[K][P];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < P; ++j) aw[k][j] = ab[k][j] = 0.0f;
  const int64_t stride = int64_t(gridDim.x) * kRowWarps;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + warp; row < N; row += stride) {
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    const float mu = RMS ? 0.0f : mean[row], rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if ((k * 32 + lane) * P < C) dx_sums_pack<T, P>(xr, dyr, w, w_off, (k * 32 + lane) * P, mu, rs, sg, sgx);
    const float mg = RMS ? 0.0f : warp_sum(sg) / float(C);
    const float mgx = warp_sum(sgx) / float(C);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = (k * 32 + lane) * P;
      if (c < C) {
        float xv[P], gv[P];
        dx_store_pack<T, P, ADD>(dx + row * C, xr, dyr, ADD ? ds + row * C : nullptr, w, w_off, c, mu, rs, mg, mgx,
                                 xv, gv);
#pragma unroll
        for (int j = 0; j < P; ++j) {
          aw[k][j] += gv[j] * (xv[j] - mu) * rs;
          if (!RMS) ab[k][j] += gv[j];
        }
      }
    }
  }
  float* mine = fused_red + int64_t(warp) * kSums * C;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = (k * 32 + lane) * P;
    if (c < C)
#pragma unroll
      for (int j = 0; j < P; ++j) {
        mine[c + j] = aw[k][j];
        if (!RMS) mine[C + c + j] = ab[k][j];
      }
  }
  __syncthreads();  // every warp's sums are in shared memory
  float* out = part + int64_t(blockIdx.x) * 2 * C;
  for (int j = warp * 32 + lane; j < kSums * C; j += 32 * kRowWarps) {
    float s = fused_red[j];
#pragma unroll
    for (int q = 1; q < kRowWarps; ++q) s += fused_red[int64_t(q) * kSums * C + j];
    out[j] = s;
  }
}

// ---------------------------------------------------------------- dw, db: deterministic column sums

// dw[c] = sum_r dy[r,c] * xhat[r,c], db[c] = sum_r dy[r,c]. Block = kColStrip columns x
// kColPhases row phases; thread (tx, ty) sums rows ty, ty + kColPhases, ... of column tx,
// then the phases are added by a fixed tree. dw or db may be null.
template <class T, class O, bool RMS>
__global__ void __launch_bounds__(kColStrip* kColPhases)
    norm_bwd_dwdb_kernel(O* __restrict__ dw, O* __restrict__ db, const T* __restrict__ dy,
                         const T* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
                         int64_t N, int C) {
  __shared__ float red_w[kColPhases][kColStrip + 1], red_b[kColPhases][kColStrip + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kColStrip + tx;
  float aw = 0.0f, ab = 0.0f;
  if (c < C) {
#pragma unroll 8
    for (int64_t r = ty; r < N; r += kColPhases) {
      const float g = to_f32(dy[r * C + c]);
      const float mu = RMS ? 0.0f : mean[r];
      aw += g * (to_f32(x[r * C + c]) - mu) * rstd[r];
      ab += g;
    }
  }
  red_w[ty][tx] = aw;
  red_b[ty][tx] = ab;
  for (int s = kColPhases / 2; s > 0; s >>= 1) {
    __syncthreads();  // the previous level's writes are visible; nobody reads the upper half after this level
    if (ty < s) {
      red_w[ty][tx] += red_w[ty + s][tx];
      red_b[ty][tx] += red_b[ty + s][tx];
    }
  }
  if (ty == 0 && c < C) {  // row 0 was last written by this same thread
    if (dw) dw[c] = from_f32<O>(red_w[0][tx]);
    if (db) db[c] = from_f32<O>(red_b[0][tx]);
  }
}

// The same sums for rows of 16-byte packs (C a multiple of P, aligned rows: every model width).
// A block of kColPackThreads is (packs x lanes), as the bias column sums of reduce.cu: thread
// (tx, ty) owns P adjacent columns (one 16-byte load of dy and of x per row) and sums rows ty,
// ty + lanes, ..., two rows in flight; a warp reads whole 32-byte sectors. The lanes then meet
// in a fixed tree: deterministic, no scratch, no atomics.
constexpr int kColPackThreads = 512;
constexpr int kColPackLanes = 256;
constexpr int kDwdbSplits = 4;  // blocks of a cluster that share a column group's rows

// dw/db column sums of one thread: rows r, r + stride, ... (< end) of the P columns from c0 added
// into aw (dy * xhat) and ab (dy), two rows in flight.
template <class T, int P, bool RMS>
__device__ __forceinline__ void dwdb_rows(float (&aw)[P], float (&ab)[P], const T* __restrict__ dy,
                                          const T* __restrict__ x, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int C, int c0, int64_t r, int64_t end,
                                          int64_t stride) {
  auto add_row = [&](int64_t row, const float (&g)[P], const float (&xv)[P]) {
    const float mu = RMS ? 0.0f : mean[row], rs = rstd[row];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      aw[k] += g[k] * (xv[k] - mu) * rs;
      ab[k] += g[k];
    }
  };
  for (; r + stride < end; r += 2 * stride) {
    float g0[P], x0[P], g1[P], x1[P];
    load_f32<T, P>(dy + r * C + c0, g0);
    load_f32<T, P>(x + r * C + c0, x0);
    load_f32<T, P>(dy + (r + stride) * C + c0, g1);
    load_f32<T, P>(x + (r + stride) * C + c0, x1);
    add_row(r, g0, x0);
    add_row(r + stride, g1, x1);
  }
  for (; r < end; r += stride) {
    float g0[P], x0[P];
    load_f32<T, P>(dy + r * C + c0, g0);
    load_f32<T, P>(x + r * C + c0, x0);
    add_row(r, g0, x0);
  }
}

// The block's row lanes (threadIdx.y) add their sums in a fixed tree: lane 0's slots of red_w and
// red_b (at me = (ty * packs + tx) * P) end with the block's sums. Every thread of the block calls it.
template <int P>
__device__ __forceinline__ void dwdb_tree(float* red_w, float* red_b, const float (&aw)[P], const float (&ab)[P],
                                          int me, int packs, int lanes) {
#pragma unroll
  for (int k = 0; k < P; ++k) {
    red_w[me + k] = aw[k];
    red_b[me + k] = ab[k];
  }
  for (int half = lanes / 2; half > 0; half >>= 1) {
    __syncthreads();  // the previous level's writes are visible
    if (int(threadIdx.y) < half) {
      const int other = me + half * packs * P;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        red_w[me + k] += red_w[other + k];
        red_b[me + k] += red_b[other + k];
      }
    }
  }
}

// A model width of 768 gives 48 such blocks, too few for 132 SMs (GPT-2: 56 us a launch, under
// 1 TB/s). So on sm_90 the rows are split over a cluster of `splits` blocks (blockIdx.x = column
// group * splits + rank): block rank s sums rows s * lanes + ty, stepping splits * lanes, and
// after its own tree, rank 0 adds the other ranks' sums from their shared memory (distributed
// shared memory), in rank order: still no scratch, no atomics, the same order every run.
template <class T, class O, int P, bool RMS>
__global__ void __launch_bounds__(kColPackThreads)
    norm_bwd_dwdb_packed_kernel(O* __restrict__ dw, O* __restrict__ db, const T* __restrict__ dy,
                                const T* __restrict__ x, const float* __restrict__ mean,
                                const float* __restrict__ rstd, int64_t N, int C, int splits) {
  __shared__ float red_w[kColPackThreads * P], red_b[kColPackThreads * P];
  const int packs = blockDim.x, lanes = blockDim.y;
  const int split = int(blockIdx.x) % splits, group = int(blockIdx.x) / splits;
  const int c0 = (group * packs + int(threadIdx.x)) * P;
  float aw[P], ab[P];
#pragma unroll
  for (int k = 0; k < P; ++k) aw[k] = ab[k] = 0.0f;
  if (c0 < C) dwdb_rows<T, P, RMS>(aw, ab, dy, x, mean, rstd, C, c0, int64_t(split) * lanes + threadIdx.y, N,
                                   int64_t(lanes) * splits);
  const int me = (int(threadIdx.y) * packs + int(threadIdx.x)) * P;
  dwdb_tree<P>(red_w, red_b, aw, ab, me, packs, lanes);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's tree is done and visible
    if (split == 0 && threadIdx.y == 0 && c0 < C)
      for (int q = 1; q < splits; ++q) {
        const float* ow = cluster.map_shared_rank(red_w, q);
        const float* ob = cluster.map_shared_rank(red_b, q);
#pragma unroll
        for (int k = 0; k < P; ++k) {
          red_w[me + k] += ow[me + k];
          red_b[me + k] += ob[me + k];
        }
      }
    cluster.sync();  // the other ranks keep their shared memory until rank 0 has read it
  }
#endif
  if (split == 0 && threadIdx.y == 0 && c0 < C) {  // lane 0's sums were last written by this same thread
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (dw) dw[c0 + k] = from_f32<O>(red_w[me + k]);
      if (db) db[c0 + k] = from_f32<O>(red_b[me + k]);
    }
  }
}

// The same sums in two passes through scratch, when the cuBLASLt workspace can lend it (the
// GPT-2 step's 25 launches: 42 us each as a cluster kernel above, whose 16-column groups read
// 32 bytes of a row at a time). Pass 1: block b owns the rows [b * rows, (b + 1) * rows) and
// every column: thread (tx, ty) owns packs tx, tx + packs, ... of P columns (a warp reads 512
// contiguous bytes of a row) and sums rows ty, ty + lanes, ... two in flight; the lanes meet in
// the fixed tree, and lane 0 writes the block's sums to part[b][0, C) (dw) and part[b][C, 2C)
// (db). Pass 2 adds the blocks' sums in block order. Fixed partition, fixed order: still
// bitwise reproducible, still no atomics, and no allocation.
template <class T, int P, bool RMS>
__global__ void __launch_bounds__(kColPackThreads)
    norm_bwd_dwdb_part_kernel(float* __restrict__ part, const T* __restrict__ dy, const T* __restrict__ x,
                              const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N, int C,
                              int64_t rows) {
  __shared__ float red_w[kColPackThreads * P], red_b[kColPackThreads * P];
  const int packs = blockDim.x, lanes = blockDim.y, npacks = C / P;
  const int64_t r0 = int64_t(blockIdx.x) * rows, r1 = r0 + rows < N ? r0 + rows : N;
  const int me = (int(threadIdx.y) * packs + int(threadIdx.x)) * P;
  float* out = part + int64_t(blockIdx.x) * 2 * C;
  for (int p0 = 0; p0 < npacks; p0 += packs) {
    const int c0 = (p0 + int(threadIdx.x)) * P;
    float aw[P], ab[P];
#pragma unroll
    for (int k = 0; k < P; ++k) aw[k] = ab[k] = 0.0f;
    if (c0 < C) dwdb_rows<T, P, RMS>(aw, ab, dy, x, mean, rstd, C, c0, r0 + threadIdx.y, r1, lanes);
    __syncthreads();  // the previous chunk's lane 0 has read its sums
    dwdb_tree<P>(red_w, red_b, aw, ab, me, packs, lanes);
    if (threadIdx.y == 0 && c0 < C) {  // lane 0's sums were last written by this same thread
#pragma unroll
      for (int k = 0; k < P; ++k) {
        out[c0 + k] = red_w[me + k];
        out[C + c0 + k] = red_b[me + k];
      }
    }
  }
}

// Pass 2: column j of the 2C sums (dw, then db) over the blocks 0..parts-1. Block (kPartCols,
// kPartLanes): thread (tx, ty) adds parts ty, ty + kPartLanes, ... of column j, then the lanes
// are added in a fixed tree.
constexpr int kPartCols = 32, kPartLanes = 32;
template <class O>
__global__ void __launch_bounds__(kPartCols* kPartLanes)
    norm_bwd_dwdb_sum_kernel(O* __restrict__ dw, O* __restrict__ db, const float* __restrict__ part, int C,
                             int parts) {
  __shared__ float red[kPartLanes][kPartCols + 1];
  const int j = int(blockIdx.x) * kPartCols + int(threadIdx.x), ty = threadIdx.y;
  float a = 0.0f;
  if (j < 2 * C) {
#pragma unroll 4
    for (int q = ty; q < parts; q += kPartLanes) a += part[int64_t(q) * 2 * C + j];
  }
  red[ty][threadIdx.x] = a;
  for (int half = kPartLanes / 2; half > 0; half >>= 1) {
    __syncthreads();
    if (ty < half) red[ty][threadIdx.x] += red[ty + half][threadIdx.x];
  }
  if (ty == 0 && j < 2 * C) {
    O* out = j < C ? dw : db;
    if (out) out[j < C ? j : j - C] = from_f32<O>(red[0][threadIdx.x]);
  }
}

// ---------------------------------------------------------------- softmax

// One row per warp (BLOCK = false, blockDim (32, kRowWarps)) or per block (BLOCK = true,
// blockDim (256)). y = exp(x - max) / sum.
template <class T, int P, bool BLOCK>
__global__ void softmax_fwd_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t N, int64_t L) {
  const int64_t row = BLOCK ? int64_t(blockIdx.x) : int64_t(blockIdx.x) * kRowWarps + threadIdx.y;
  if (!BLOCK && row >= N) return;
  const int tid = threadIdx.x, nt = BLOCK ? blockDim.x : 32;
  const T* xr = x + row * L;
  OnlineMax<T> st;
  for (int64_t c = int64_t(tid) * P; c < L; c += int64_t(nt) * P) {
    float v[P];
    load_f32<T, P>(xr + c, v);
    st.template add<P>(v);
  }
  if (BLOCK) st.block_reduce();
  else st.warp_reduce();
  const float inv = st.s > 0.0f ? 1.0f / st.s : 0.0f;
  T* yr = y + row * L;
  for (int64_t c = int64_t(tid) * P; c < L; c += int64_t(nt) * P) {
    float v[P];
    load_f32<T, P>(xr + c, v);
#pragma unroll
    for (int k = 0; k < P; ++k) v[k] = st.m == -INFINITY ? 0.0f : exp_acc<T>(v[k] - st.m) * inv;
    store_f32<T, P>(yr + c, v);
  }
}

// dx = y * (dy - sum(dy * y)).
template <class T, int P, bool BLOCK>
__global__ void softmax_bwd_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ y, int64_t N,
                                   int64_t L) {
  const int64_t row = BLOCK ? int64_t(blockIdx.x) : int64_t(blockIdx.x) * kRowWarps + threadIdx.y;
  if (!BLOCK && row >= N) return;
  const int tid = threadIdx.x, nt = BLOCK ? blockDim.x : 32;
  const T* yr = y + row * L;
  const T* dyr = dy + row * L;
  float dot = 0.0f, unused = 0.0f;
  for (int64_t c = int64_t(tid) * P; c < L; c += int64_t(nt) * P) {
    float yv[P], gv[P];
    load_f32<T, P>(yr + c, yv);
    load_f32<T, P>(dyr + c, gv);
#pragma unroll
    for (int k = 0; k < P; ++k) dot += yv[k] * gv[k];
  }
  if (BLOCK) block_sum2(dot, unused);
  else dot = warp_sum(dot);
  T* dxr = dx + row * L;
  for (int64_t c = int64_t(tid) * P; c < L; c += int64_t(nt) * P) {
    float yv[P], gv[P];
    load_f32<T, P>(yr + c, yv);
    load_f32<T, P>(dyr + c, gv);
#pragma unroll
    for (int k = 0; k < P; ++k) gv[k] = yv[k] * (gv[k] - dot);
    store_f32<T, P>(dxr + c, gv);
  }
}

// ---------------------------------------------------------------- launch helpers

void check_rows(const char* op, const Tensor& t, int64_t N, int64_t C, const char* name) {
  LT_CHECK(t.defined() && t.numel() == N * C && t.is_contiguous(),
           std::string(op) + ": " + name + " is not a contiguous [" + std::to_string(N) + ", " + std::to_string(C) +
               "] tensor",
           "the CUDA kernel expects row-major rows of the normalised size", "");
}
void check_vec(const char* op, const Tensor& t, int64_t n, DType dt, const char* name) {
  LT_CHECK(t.defined() && t.numel() == n && t.dtype() == dt && t.is_contiguous(),
           std::string(op) + ": " + name + " must be a contiguous " + dtype_name(dt) + " vector of " +
               std::to_string(n) + " elements",
           "the CUDA kernel reads/writes it directly", "");
}
// A parameter gradient (dw, db): a vector like check_vec's, of the rows' dtype or f32 for 16-bit
// rows (autocast's parameter gradients); dw and db of one dtype.
void check_param_grad(const char* op, const Tensor& t, int64_t n, DType rows, const Tensor& other, const char* name) {
  const bool wide = t.defined() && t.dtype() == DType::F32 && (rows == DType::BF16 || rows == DType::F16);
  check_vec(op, t, n, wide ? DType::F32 : rows, name);
  LT_CHECK(!other.defined() || other.dtype() == t.dtype(), std::string(op) + ": dw and db of different dtypes",
           std::string(dtype_name(t.dtype())) + " and " + dtype_name(other.dtype()), "allocate both in one dtype");
}
int64_t last_dim(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }

// Whether packs of P = 16/sizeof(T) elements can be used for rows of length C.
template <class T> bool can_vectorise(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % kVec<T> != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

dim3 row_grid(int64_t N) { return dim3(unsigned((N + kRowWarps - 1) / kRowWarps)); }

// go(pack, flag) with pack = the 16-byte pack's element count when vec (else 1) and flag a
// kernel's one boolean variant (the norms' fused residual add, softmax's block-per-row), each as
// a compile-time tag: the row kernels' four instantiations.
template <class T, class F> void with_pack_and_flag(bool vec, bool flag, F&& go) {
  using V = std::integral_constant<int, kVec<T>>;
  using S = std::integral_constant<int, 1>;
  if (flag && vec) go(V{}, std::true_type{});
  else if (flag) go(S{}, std::true_type{});
  else if (vec) go(V{}, std::false_type{});
  else go(S{}, std::false_type{});
}

// r and sum undefined: the plain norm of x; defined: the fused add (sum = x + r is normalised).
template <class T, bool RMS>
void launch_norm_fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& r,
                     const Tensor& sum, const Tensor& w, const Tensor& b, float eps, float w_off = 0.0f) {
  const int64_t C = last_dim(x), N = x.numel() / C;
  if (N == 0) return;
  T* py = y.data<T>();
  const T *px = x.data<T>(), *pw = w.data<T>(), *pb = b.defined() ? b.data<T>() : nullptr;
  const T* pr_in = r.defined() ? r.data<T>() : nullptr;
  T* ps = sum.defined() ? sum.data<T>() : nullptr;
  float* pm = mean.defined() ? mean.data<float>() : nullptr;
  float* pr = rstd.defined() ? rstd.data<float>() : nullptr;
  const dim3 block(32, kRowWarps);
  const bool vec = can_vectorise<T>(C, {py, px, pw, pb, pr_in, ps});
  auto go = [&](auto vtag, auto atag) {
    constexpr int P = decltype(vtag)::value;
    constexpr bool ADD = decltype(atag)::value;
    norm_fwd_kernel<T, P, RMS, ADD><<<row_grid(N), block, 0, current_stream()>>>(py, pm, pr, px, pr_in, ps, pw, pb, N,
                                                                                int(C), eps, w_off);
  };
  with_pack_and_flag<T>(vec, ps != nullptr, go);
  LT_CUDA_LAUNCH_CHECK("norm_fwd_kernel");
}

// dw, db (either may be undefined) of launch_norm_bwd, of dtype O.
template <class T, class O, bool RMS>
void launch_norm_dwdb(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& mean,
                      const Tensor& rstd) {
  const int64_t C = last_dim(x), N = x.numel() / C;
  const T *pdy = dy.data<T>(), *px = x.data<T>();
  const float* pm = RMS ? nullptr : mean.data<float>();
  const float* pr = rstd.data<float>();
  O* pdw = dw.defined() ? dw.data<O>() : nullptr;
  O* pdb = db.defined() ? db.data<O>() : nullptr;
  if (pdw || pdb) {  // N == 0 still writes zeros
    if (can_vectorise<T>(C, {pdy, px}) && N > 0) {
      // Two passes through the borrowed cuBLASLt workspace: a block per 8+ rows per lane, at
      // most two per SM, as many as the scratch holds (2C f32 sums each).
      const int dev = dy.device().index;
      int64_t ws_bytes = 0;
      void* ws = cublaslt_workspace_borrow(dev, &ws_bytes);
      const int npacks = int(C / kVec<T>);
      const int packs = npacks < kColPackThreads ? npacks : kColPackThreads;
      int lanes = 1;
      while (lanes * 2 * packs <= kColPackThreads && lanes * 2 <= N) lanes *= 2;
      const int64_t sms = device_state(dev).sm_count, fit = ws ? ws_bytes / (2 * C * int64_t(sizeof(float))) : 0;
      // (Measured on GPT-2's 16384 x 768: 1, 3 or 4 blocks per SM and 4 rows in flight were no
      // faster: 25-35 us against 25.)
      const int64_t wanted = std::min<int64_t>(2 * sms, (N + 8 * lanes - 1) / (8 * lanes));
      int64_t parts = std::min(wanted, fit);
      if (parts >= 1 && (parts == wanted || parts >= sms)) {
        const int64_t rows = (N + parts - 1) / parts;
        parts = (N + rows - 1) / rows;  // no block without rows
        float* part = static_cast<float*>(ws);
        const dim3 grid{unsigned(parts)}, block{unsigned(packs), unsigned(lanes)};
        norm_bwd_dwdb_part_kernel<T, kVec<T>, RMS><<<grid, block, 0, current_stream()>>>(part, pdy, px, pm, pr, N,
                                                                                        int(C), rows);
        LT_CUDA_LAUNCH_CHECK("norm_bwd_dwdb_part_kernel");
        norm_bwd_dwdb_sum_kernel<O><<<unsigned((2 * C + kPartCols - 1) / kPartCols), dim3(kPartCols, kPartLanes), 0,
                                      current_stream()>>>(pdw, pdb, part, int(C), int(parts));
        LT_CUDA_LAUNCH_CHECK("norm_bwd_dwdb_sum_kernel");
        return;
      }
    }
    if (can_vectorise<T>(C, {pdy, px})) {
      int lanes = 1;
      while (lanes < kColPackLanes && lanes < N) lanes *= 2;
      const int packs = kColPackThreads / lanes;
      const int64_t npacks = C / kVec<T>;
      const unsigned groups = unsigned((npacks + packs - 1) / packs);
      // Split the rows over a cluster when the column groups alone leave most SMs idle and
      // every block still gets rows (kDwdbSplits blocks of `lanes` rows, twice over).
      const int splits = cluster_launch_ok() && groups < 2u * unsigned(device_state(dy.device().index).sm_count) &&
                                 N >= int64_t(2) * kDwdbSplits * lanes
                             ? kDwdbSplits
                             : 1;
      ClusterLaunch l(dim3(groups * unsigned(splits)), dim3(unsigned(packs), unsigned(lanes)), 0, current_stream(), splits);
      LT_CUDA_CHECK(cudaLaunchKernelEx(&l.cfg, norm_bwd_dwdb_packed_kernel<T, O, kVec<T>, RMS>, pdw, pdb, pdy, px, pm, pr,
                                       N, int(C), splits));
      LT_CUDA_LAUNCH_CHECK("norm_bwd_dwdb_packed_kernel");
      return;
    }
    const dim3 grid(unsigned((C + kColStrip - 1) / kColStrip)), block(kColStrip, kColPhases);
    norm_bwd_dwdb_kernel<T, O, RMS><<<grid, block, 0, current_stream()>>>(pdw, pdb, pdy, px, pm, pr, N, int(C));
    LT_CUDA_LAUNCH_CHECK("norm_bwd_dwdb_kernel");
  }
}

// LEANTRAIN_NORM_FUSED_BWD=0: dx and the dw/db sums in separate passes (for measuring).
bool fused_norm_bwd_allowed() {
  static const bool on = knob_on("LEANTRAIN_NORM_FUSED_BWD");
  return on;
}

// dx, dw and db in one pass (norm_bwd_fused_kernel) and the blocks' sums added after, when the
// rows are 16-byte packs and at most 1024 columns (each lane then keeps at most 32 f32 sums of
// dw and 32 of db; RMSNorm, without db: 2048 columns, 64 sums) and the borrowed cuBLASLt
// workspace holds 2C sums for every block of a grid of at least one block per SM. False: nothing
// was launched.
template <class T, class O, bool RMS>
bool launch_norm_bwd_fused(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& ds,
                           const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, float w_off) {
  constexpr int P = kVec<T>, kPacksPerStep = P == 4 ? 2 : 1;  // f32 rows: 2 packs of 4 per step
  const int64_t C = last_dim(x), N = x.numel() / C;
  T* pdx = dx.data<T>();
  const T *pdy = dy.data<T>(), *px = x.data<T>(), *pw = w.data<T>();
  const T* pds = ds.defined() ? ds.data<T>() : nullptr;
  if (!fused_norm_bwd_allowed() || N == 0 || !can_vectorise<T>(C, {pdx, pdy, px, pw, pds})) return false;
  const int64_t lane_packs = (C / P + 31) / 32;
  const int steps = int((lane_packs + kPacksPerStep - 1) / kPacksPerStep);
  if (steps > (RMS ? 8 : 4) || (RMS && db.defined())) return false;
  const int dev = dy.device().index;
  int64_t ws_bytes = 0;
  void* ws = cublaslt_workspace_borrow(dev, &ws_bytes);
  if (!ws) return false;
  constexpr int kSums = RMS ? 1 : 2;  // the kernel's sums a column: dw (and db)
  const int64_t part_bytes = 2 * C * int64_t(sizeof(float)), sms = device_state(dev).sm_count;
  const size_t smem = size_t(kRowWarps) * size_t(kSums * C) * sizeof(float);
  bool launched = false;
  auto go = [&](auto ktag, auto atag) {
    constexpr int K = decltype(ktag)::value * kPacksPerStep;
    constexpr bool ADD = decltype(atag)::value;
    auto kernel = norm_bwd_fused_kernel<T, P, K, RMS, ADD>;
    int per_sm = 0;  // depends on C (the shared memory): asked at each call, a few microseconds
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kRowWarps, smem) != cudaSuccess) per_sm = 0;
    // The whole grid resident at once and as many blocks as the scratch holds (a grid under one
    // block per SM would be slower than the two passes); then as few blocks as give no warp more
    // rows than that grid would (fewer sums to add, no longer tail).
    const int64_t row_blocks = (N + kRowWarps - 1) / kRowWarps;
    const int64_t most = std::min({sms * per_sm, row_blocks, ws_bytes / part_bytes});
    if (per_sm < 1 || (most < sms && most < row_blocks)) return;
    const int64_t rows_per_warp = (N + most * kRowWarps - 1) / (most * kRowWarps);
    const int64_t blocks = (N + rows_per_warp * kRowWarps - 1) / (rows_per_warp * kRowWarps);
    kernel<<<unsigned(blocks), dim3(32, kRowWarps), smem, current_stream()>>>(
        pdx, static_cast<float*>(ws), pdy, pds, px, pw, RMS ? nullptr : mean.data<float>(), rstd.data<float>(), N,
        int(C), w_off);
    LT_CUDA_LAUNCH_CHECK("norm_bwd_fused_kernel");
    O* pdw = dw.defined() ? dw.data<O>() : nullptr;
    O* pdb = db.defined() ? db.data<O>() : nullptr;
    norm_bwd_dwdb_sum_kernel<O><<<unsigned((kSums * C + kPartCols - 1) / kPartCols), dim3(kPartCols, kPartLanes), 0,
                                  current_stream()>>>(pdw, pdb, static_cast<const float*>(ws), int(C), int(blocks));
    LT_CUDA_LAUNCH_CHECK("norm_bwd_dwdb_sum_kernel");
    launched = true;
  };
  auto with_add = [&](auto ktag) {
    if (pds) go(ktag, std::true_type{});
    else go(ktag, std::false_type{});
  };
  switch (steps) {
    case 1: with_add(std::integral_constant<int, 1>{}); break;
    case 2: with_add(std::integral_constant<int, 2>{}); break;
    case 3: with_add(std::integral_constant<int, 3>{}); break;
    case 4: with_add(std::integral_constant<int, 4>{}); break;
    default:
      if constexpr (RMS) with_add(std::integral_constant<int, 8>{});  // 5 to 8 steps
      break;
  }
  return launched;
}

// ds defined: dx = ds + the norm's dx (the fused add's backward).
template <class T, bool RMS>
void launch_norm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& ds,
                     const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, float w_off = 0.0f) {
  const int64_t C = last_dim(x), N = x.numel() / C;
  const T *pdy = dy.data<T>(), *px = x.data<T>(), *pw = w.data<T>();
  const T* pds = ds.defined() ? ds.data<T>() : nullptr;
  const float* pm = RMS ? nullptr : mean.data<float>();
  const float* pr = rstd.data<float>();
  // dw, db: of T, or f32 for 16-bit T (autocast's parameter gradients, the sums unrounded).
  const DType out = dw.defined() ? dw.dtype() : db.defined() ? db.dtype() : x.dtype();
  if (dx.defined() && (dw.defined() || db.defined())) {
    if constexpr (sizeof(T) == 2) {
      if (out == DType::F32 && launch_norm_bwd_fused<T, float, RMS>(dx, dw, db, dy, ds, x, w, mean, rstd, w_off)) return;
    }
    if (out == x.dtype() && launch_norm_bwd_fused<T, T, RMS>(dx, dw, db, dy, ds, x, w, mean, rstd, w_off)) return;
  }
  if (dx.defined() && N > 0) {
    T* pdx = dx.data<T>();
    const dim3 block(32, kRowWarps);
    const bool vec = can_vectorise<T>(C, {pdx, pdy, px, pw, pds});
    auto go = [&](auto vtag, auto atag) {
      constexpr int P = decltype(vtag)::value;
      constexpr bool ADD = decltype(atag)::value;
      norm_bwd_dx_kernel<T, P, RMS, ADD><<<row_grid(N), block, 0, current_stream()>>>(pdx, pdy, pds, px, pw, pm, pr,
                                                                                     N, int(C), w_off);
    };
    with_pack_and_flag<T>(vec, pds != nullptr, go);
    LT_CUDA_LAUNCH_CHECK("norm_bwd_dx_kernel");
  }
  if constexpr (sizeof(T) == 2) {
    if (out == DType::F32) return launch_norm_dwdb<T, float, RMS>(dw, db, dy, x, mean, rstd);
  }
  launch_norm_dwdb<T, T, RMS>(dw, db, dy, x, mean, rstd);
}

void check_norm(const char* op, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t C = last_dim(x);
  LT_CHECK(C > 0 && C <= (int64_t(1) << 30), std::string(op) + ": row length " + std::to_string(C),
           "the CUDA kernel takes rows of 1 to 2^30 elements", "");
  const int64_t N = x.numel() / C;
  check_rows(op, x, N, C, "x");
  check_rows(op, y, N, C, "y/dx");
  LT_CHECK(y.dtype() == x.dtype(), std::string(op) + ": dtype mismatch", "input and output must share a dtype", "");
  check_vec(op, w, C, x.dtype(), "weight");
  if (b.defined()) check_vec(op, b, C, x.dtype(), "bias");
}

// Every defined operand in `others` has ref's dtype (the fused add's addends, sum and gradients).
void check_same_dtypes(const char* op, const Tensor& ref, std::initializer_list<Tensor> others) {
  for (const Tensor& t : others)
    LT_CHECK(!t.defined() || t.dtype() == ref.dtype(), std::string(op) + ": dtype mismatch",
             std::string("got ") + dtype_name(t.dtype()) + " next to " + dtype_name(ref.dtype()),
             "the fused add and its gradients share one storage dtype");
}

template <bool BWD> void launch_softmax(const Tensor& out, const Tensor& a, const Tensor& y) {
  const char* op = BWD ? "softmax_bwd" : "softmax_fwd";
  const int64_t L = last_dim(a), N = L == 0 ? 0 : a.numel() / L;
  check_rows(op, a, N, L, "input");
  check_rows(op, out, N, L, "output");
  if (BWD) check_rows(op, y, N, L, "y");
  LT_CHECK(out.dtype() == a.dtype() && (!BWD || y.dtype() == a.dtype()), std::string(op) + ": dtype mismatch",
           "all operands must share a dtype", "");
  if (N == 0 || L == 0) return;
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    const T* pa = a.data<T>();
    const T* py = BWD ? y.data<T>() : nullptr;
    const bool vec = can_vectorise<T>(L, {po, pa, py});
    const bool block = L > 1024;
    const dim3 grid = block ? dim3(unsigned(N)) : row_grid(N);
    const dim3 threads = block ? dim3(256) : dim3(32, kRowWarps);
    LT_CHECK(!block || N < (int64_t(1) << 31), std::string(op) + ": too many rows", "grid limit", "");
    auto go = [&](auto vtag, auto btag) {
      constexpr int P = decltype(vtag)::value;
      constexpr bool B = decltype(btag)::value;
      if constexpr (BWD) softmax_bwd_kernel<T, P, B><<<grid, threads, 0, current_stream()>>>(po, pa, py, N, L);
      else softmax_fwd_kernel<T, P, B><<<grid, threads, 0, current_stream()>>>(po, pa, N, L);
    };
    with_pack_and_flag<T>(vec, block, go);
    LT_CUDA_LAUNCH_CHECK(BWD ? "softmax_bwd_kernel" : "softmax_fwd_kernel");
  });
}

}  // namespace

void CudaBackend::layernorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                const Tensor& w, const Tensor& b, float eps) {
  check_norm("layernorm_fwd", y, x, w, b);
  const int64_t C = last_dim(x), N = x.numel() / C;
  if (mean.defined()) check_vec("layernorm_fwd", mean, N, DType::F32, "mean");
  if (rstd.defined()) check_vec("layernorm_fwd", rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) {
    launch_norm_fwd<decltype(tag), false>(y, mean, rstd, x, Tensor(), Tensor(), w, b, eps);
  });
}

void CudaBackend::layernorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_bwd";
  check_norm(op, dy, x, w, Tensor());
  const int64_t C = last_dim(x), N = x.numel() / C;
  if (dx.defined()) check_rows(op, dx, N, C, "dx");
  if (dw.defined()) check_param_grad(op, dw, C, x.dtype(), db, "dw");
  if (db.defined()) check_param_grad(op, db, C, x.dtype(), dw, "db");
  LT_CHECK(!dx.defined() || dx.dtype() == x.dtype(), "layernorm_bwd: dx dtype", "dx must have x's dtype", "");
  check_vec(op, mean, N, DType::F32, "mean");
  check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) {
    launch_norm_bwd<decltype(tag), false>(dx, dw, db, dy, Tensor(), x, w, mean, rstd);
  });
}

void CudaBackend::rmsnorm_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps,
                              float w_offset) {
  check_norm("rmsnorm_fwd", y, x, w, Tensor());
  const int64_t C = last_dim(x), N = x.numel() / C;
  if (rstd.defined()) check_vec("rmsnorm_fwd", rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) {
    launch_norm_fwd<decltype(tag), true>(y, Tensor(), rstd, x, Tensor(), Tensor(), w, Tensor(), eps, w_offset);
  });
}

void CudaBackend::rmsnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& rstd, float w_offset) {
  const char* op = "rmsnorm_bwd";
  check_norm(op, dy, x, w, Tensor());
  const int64_t C = last_dim(x), N = x.numel() / C;
  if (dx.defined()) check_rows(op, dx, N, C, "dx");
  if (dw.defined()) check_param_grad(op, dw, C, x.dtype(), Tensor(), "dw");
  LT_CHECK(!dx.defined() || dx.dtype() == x.dtype(), "rmsnorm_bwd: dx dtype", "dx must have x's dtype", "");
  check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) {
    launch_norm_bwd<decltype(tag), true>(dx, dw, Tensor(), dy, Tensor(), x, w, Tensor(), rstd, w_offset);
  });
}

void CudaBackend::add_layernorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, float eps) {
  const char* op = "add_layernorm_fwd";
  check_norm(op, y, x, w, b);
  const int64_t C = last_dim(x), N = x.numel() / C;
  check_rows(op, r, N, C, "residual");
  check_rows(op, sum, N, C, "sum");
  check_same_dtypes(op, x, {r, sum});
  if (mean.defined()) check_vec(op, mean, N, DType::F32, "mean");
  if (rstd.defined()) check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) { launch_norm_fwd<decltype(tag), false>(y, mean, rstd, x, r, sum, w, b, eps); });
}

void CudaBackend::add_layernorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                    const Tensor& ds, const Tensor& sum, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd) {
  const char* op = "add_layernorm_bwd";
  check_norm(op, dy, sum, w, Tensor());
  const int64_t C = last_dim(sum), N = sum.numel() / C;
  check_rows(op, dsum, N, C, "dsum");
  if (ds.defined()) check_rows(op, ds, N, C, "ds");
  check_same_dtypes(op, sum, {dsum, ds});
  if (dw.defined()) check_param_grad(op, dw, C, sum.dtype(), db, "dw");
  if (db.defined()) check_param_grad(op, db, C, sum.dtype(), dw, "db");
  check_vec(op, mean, N, DType::F32, "mean");
  check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(sum.dtype(), [&](auto tag) {
    launch_norm_bwd<decltype(tag), false>(dsum, dw, db, dy, ds, sum, w, mean, rstd);
  });
}

void CudaBackend::add_rmsnorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& rstd, const Tensor& x,
                                  const Tensor& r, const Tensor& w, float eps, float w_offset) {
  const char* op = "add_rmsnorm_fwd";
  check_norm(op, y, x, w, Tensor());
  const int64_t C = last_dim(x), N = x.numel() / C;
  check_rows(op, r, N, C, "residual");
  check_rows(op, sum, N, C, "sum");
  check_same_dtypes(op, x, {r, sum});
  if (rstd.defined()) check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(x.dtype(), [&](auto tag) {
    launch_norm_fwd<decltype(tag), true>(y, Tensor(), rstd, x, r, sum, w, Tensor(), eps, w_offset);
  });
}

void CudaBackend::add_rmsnorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& dy, const Tensor& ds,
                                  const Tensor& sum, const Tensor& w, const Tensor& rstd, float w_offset) {
  const char* op = "add_rmsnorm_bwd";
  check_norm(op, dy, sum, w, Tensor());
  const int64_t C = last_dim(sum), N = sum.numel() / C;
  check_rows(op, dsum, N, C, "dsum");
  if (ds.defined()) check_rows(op, ds, N, C, "ds");
  check_same_dtypes(op, sum, {dsum, ds});
  if (dw.defined()) check_param_grad(op, dw, C, sum.dtype(), Tensor(), "dw");
  check_vec(op, rstd, N, DType::F32, "rstd");
  dispatch_float(sum.dtype(), [&](auto tag) {
    launch_norm_bwd<decltype(tag), true>(dsum, dw, Tensor(), dy, ds, sum, w, Tensor(), rstd, w_offset);
  });
}

void CudaBackend::softmax_fwd(const Tensor& y, const Tensor& x) { launch_softmax<false>(y, x, Tensor()); }

void CudaBackend::softmax_bwd(const Tensor& dx, const Tensor& dy, const Tensor& y) { launch_softmax<true>(dx, dy, y); }

}  // namespace lt
