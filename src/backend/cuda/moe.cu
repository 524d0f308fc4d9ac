// Mixture-of-experts kernels (the CPU reference is cpu_moe.cpp; backend/moe_ops.def states each op).
//
// Routing: one warp per token (softmax in f32, the top k picked one at a time as the largest
// element below the previous pick in the order (prob descending, index ascending), which is
// torch.topk's order with ties to the lower expert). The sort is a stable counting sort in one
// block: per-warp histograms in shared memory, then each warp places its entries in order with
// __match_any_sync ranks, so the result is the same every run. Nothing uses float atomics.
//
// Grouped GEMM: one launch for every expert. The grid covers the worst case of row tiles
// (ceil(R / BM) + E, since each expert's last tile may be partial) times the column tiles; each
// block finds its expert and tile from the offsets on the device (no copy to the host, no
// synchronisation) and blocks past the real tiles return at once. 16-bit operands run on tensor
// cores (mma.sync m16n8k16, f32 accumulators, ldmatrix from shared tiles loaded with cp.async,
// two stages); any shape works, unaligned ones load element by element. f32 runs a register-tiled
// SIMT kernel (true f32, as the dense GEMMs' tests expect). The weight gradient (c_e = a_e^T b_e
// over expert e's rows) is the same kernel with the reduction over the expert's rows.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "backend/moe_kernels.h"
#include "backend/nf4.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/nf4_decode.cuh"
#include "backend/cuda/row_kernels.cuh"
#include "core/knobs.h"

namespace lt {
using namespace cuda;

namespace {

// ---------------------------------------------------------------- routing

// (v, i) comes before (pv, pi) in the top-k order.
__device__ __forceinline__ bool before(float v, int i, float pv, int pi) { return v > pv || (v == pv && i < pi); }

template <class L, class W>
__global__ void route_fwd_kernel(W* weights, int32_t* idx, float* probs, const L* logits, int n, int e, int k,
                                 bool renorm) {
  const int warp = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= n) return;
  const L* z = logits + int64_t(warp) * e;
  float* p = probs + int64_t(warp) * e;
  float mx = -INFINITY;
  for (int c = lane; c < e; c += 32) mx = fmaxf(mx, to_f32(z[c]));
  mx = warp_max(mx);
  float sum = 0.f;
  for (int c = lane; c < e; c += 32) sum += expf(to_f32(z[c]) - mx);
  sum = warp_sum(sum);
  for (int c = lane; c < e; c += 32) p[c] = expf(to_f32(z[c]) - mx) / sum;
  __syncwarp();
  float pv = INFINITY, total = 0.f;
  int pi = -1;
  float vals[32];  // k <= 32 kept in registers for the renormalisation (host checks)
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int c = lane; c < e; c += 32) {
      const float v = p[c];
      if (before(pv, pi, v, c) && before(v, c, bv, bi)) bv = v, bi = c;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    pv = bv, pi = bi;
    vals[j] = bv;
    total += bv;  // left to right, as the CPU and torch's sum over k
    if (lane == 0) idx[int64_t(warp) * k + j] = bi;
  }
  if (lane == 0)
    for (int j = 0; j < k; ++j) store_t(weights, int64_t(warp) * k + j, renorm ? vals[j] / total : vals[j]);
}

template <class L, class W>
__global__ void route_bwd_kernel(L* dlogits, const W* dweights, const float* probs, const int32_t* idx, int n, int e,
                                 int k, bool renorm, const float* aux, const uint8_t* mask) {
  const int warp = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= n) return;
  const float* p = probs + int64_t(warp) * e;
  const int32_t* ix = idx + int64_t(warp) * k;
  const W* dw = dweights + int64_t(warp) * k;
  float total = 0.f, dot = 0.f;
  for (int j = 0; j < k; ++j) {  // every lane, in order (k is small)
    const float v = p[ix[j]];
    total += v;
    dot += load_t(dw, j) * v;
  }
  const bool with_aux = aux && (!mask || mask[warp]);
  float s = 0.f;
  for (int c = lane; c < e; c += 32) {
    float dp = with_aux ? aux[c] : 0.f;
    for (int j = 0; j < k; ++j)
      if (ix[j] == c) {
        const float g = load_t(dw, j);
        dp += renorm ? (g - dot / total) / total : g;
      }
    s += p[c] * dp;
  }
  s = warp_sum(s);
  for (int c = lane; c < e; c += 32) {
    float dp = with_aux ? aux[c] : 0.f;
    for (int j = 0; j < k; ++j)
      if (ix[j] == c) {
        const float g = load_t(dw, j);
        dp += renorm ? (g - dot / total) / total : g;
      }
    store_t(dlogits + int64_t(warp) * e, c, p[c] * (dp - s));
  }
}

// One block per expert; rows strided over the threads, then the block's fixed-order sum.
__global__ void route_stats_kernel(float* psum, float* counts, const float* probs, const int32_t* idx, int n, int e,
                                   int k, const uint8_t* mask) {
  const int c = blockIdx.x;
  float s = 0.f, cnt = 0.f;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    if (mask && !mask[r]) continue;
    s += probs[int64_t(r) * e + c];
    for (int j = 0; j < k; ++j) cnt += idx[int64_t(r) * k + j] == c ? 1.f : 0.f;
  }
  s = block_sum(s);
  cnt = block_sum(cnt);
  if (threadIdx.x == 0) psum[c] += s, counts[c] += cnt;
}

// The stable counting sort (see the file comment). hist: W warps x E counters in shared memory.
__global__ void sort_kernel(int32_t* offsets, int32_t* rows, int32_t* pos, const int32_t* idx, int r, int e) {
  extern __shared__ int32_t hist[];  // [W][E], then the totals [E]
  const int nw = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int32_t* tot = hist + nw * e;
  for (int i = threadIdx.x; i < nw * e; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  const int chunk = (r + nw - 1) / nw, lo = w * chunk, hi = min(r, lo + chunk);
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const int x = i < hi ? idx[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, x);
    if (x >= 0 && (peers & lt_mask) == 0) hist[w * e + x] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  for (int c = threadIdx.x; c < e; c += blockDim.x) {
    int t = 0;
    for (int v = 0; v < nw; ++v) t += hist[v * e + c];
    tot[c] = t;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int c = 0; c < e; ++c) {
      const int t = tot[c];
      tot[c] = run;
      offsets[c] = run;
      run += t;
    }
    offsets[e] = run;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < e; c += blockDim.x) {  // each warp's first slot per expert
    int run = tot[c];
    for (int v = 0; v < nw; ++v) {
      const int h = hist[v * e + c];
      hist[v * e + c] = run;
      run += h;
    }
  }
  __syncthreads();
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const int x = i < hi ? idx[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, x);
    if (x >= 0) {
      const int p = hist[w * e + x] + __popc(peers & lt_mask);
      rows[p] = i;
      pos[i] = p;
    }
    __syncwarp();
    if (x >= 0 && (peers & lt_mask) == 0) hist[w * e + x] += __popc(peers);
    __syncwarp();
  }
}

template <class U>
__global__ void gather_kernel(U* out, const U* x, const int32_t* rows, int64_t r, int64_t units, int k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < r * units; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / units, u = i - row * units;
    out[i] = x[int64_t(rows[row] / k) * units + u];
  }
}

template <class T>
__global__ void gather_bwd_kernel(T* dx, const T* dout, const int32_t* pos, int64_t n, int64_t c, int k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * c; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / c, col = i - t * c;
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += load_t(dout, int64_t(pos[t * k + j]) * c + col);
    store_t(dx, i, s);
  }
}

template <class T> __device__ __forceinline__ float round_to(float v) {
  T t;
  store_t(&t, 0, v);
  return load_t(&t, 0);
}

// A token's slots 0 .. k-1 in `order` put in increasing expert order (idx_t: the token's k experts),
// stably: an insertion sort by one thread (k <= 64).
__device__ __forceinline__ void sort_slots_by_expert(int* order, const int32_t* idx_t, int k) {
  for (int a = 1; a < k; ++a)
    for (int b = a; b > 0 && idx_t[order[b - 1]] > idx_t[order[b]]; --b) {
      const int s = order[b];
      order[b] = order[b - 1];
      order[b - 1] = s;
    }
}

// One block per token: its slots in expert order (thread 0 sorts k <= 64 in shared memory).
template <class T, class W>
__global__ void combine_kernel(T* out, const T* ys, const W* w, const int32_t* idx, const int32_t* pos, int64_t c, int k) {
  __shared__ int order[64];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int j = 0; j < k; ++j) order[j] = j;
    sort_slots_by_expert(order, idx + t * k, k);
  }
  __syncthreads();
  for (int64_t col = threadIdx.x; col < c; col += blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < k; ++q) {
      const int j = order[q];
      const float term = round_to<T>(load_t(w, t * k + j) * load_t(ys, int64_t(pos[t * k + j]) * c + col));
      acc = round_to<T>(acc + term);
    }
    store_t(out, t * c + col, acc);
  }
}

template <class T, class W>
__global__ void combine_bwd_kernel(T* dys, W* dw, const T* dout, const T* ys, const W* w, const int32_t* pos, int64_t c,
                                   int k) {
  const int64_t t = blockIdx.x;
  for (int j = 0; j < k; ++j) {
    const int64_t row = pos[t * k + j];
    const float wv = load_t(w, t * k + j);
    float s = 0.f;
    for (int64_t col = threadIdx.x; col < c; col += blockDim.x) {
      const float g = load_t(dout, t * c + col);
      store_t(dys, row * c + col, g * wv);
      s += g * load_t(ys, row * c + col);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) store_t(dw, t * k + j, s);
  }
}

// The combine with P columns a thread moved as one 16-byte access (c % P == 0, the rows aligned):
// each column's arithmetic is combine_kernel's, in the same order, so the bits are the same; the
// k loads of a thread are independent of each other (their rows and weights sit in shared memory)
// rather than one dependent scalar load after another.
template <class T, class W, int P>
__global__ void combine_vec_kernel(T* out, const T* ys, const W* w, const int32_t* idx, const int32_t* pos, int64_t c,
                                   int k) {
  __shared__ int order[64];
  __shared__ int64_t s_row[64];
  __shared__ float s_w[64];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) order[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) sort_slots_by_expert(order, idx + t * k, k);
  __syncthreads();
  if (threadIdx.x < k) {
    const int j = order[threadIdx.x];
    s_row[threadIdx.x] = int64_t(pos[t * k + j]) * c;
    s_w[threadIdx.x] = load_t(w, t * k + j);
  }
  __syncthreads();
  for (int64_t col = int64_t(threadIdx.x) * P; col < c; col += int64_t(blockDim.x) * P) {
    float acc[P];
#pragma unroll
    for (int e = 0; e < P; ++e) acc[e] = 0.f;
#pragma unroll 4
    for (int q = 0; q < k; ++q) {
      float y[P];
      rk::load_f32<T, P>(ys + s_row[q] + col, y);
      const float wv = s_w[q];
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] = round_to<T>(acc[e] + round_to<T>(wv * y[e]));
    }
    rk::store_f32<T, P>(out + t * c + col, acc);
  }
}

// combine_bwd_kernel with P columns a thread as one 16-byte access (the same conditions).
template <class T, class W, int P>
__global__ void combine_bwd_vec_kernel(T* dys, W* dw, const T* dout, const T* ys, const W* w, const int32_t* pos,
                                       int64_t c, int k) {
  const int64_t t = blockIdx.x;
  for (int j = 0; j < k; ++j) {
    const int64_t row = pos[t * k + j];
    const float wv = load_t(w, t * k + j);
    float s = 0.f;
    for (int64_t col = int64_t(threadIdx.x) * P; col < c; col += int64_t(blockDim.x) * P) {
      float g[P], y[P], d[P];
      rk::load_f32<T, P>(dout + t * c + col, g);
      rk::load_f32<T, P>(ys + row * c + col, y);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        d[e] = g[e] * wv;
        s += g[e] * y[e];
      }
      rk::store_f32<T, P>(dys + row * c + col, d);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) store_t(dw, t * k + j, s);
  }
}

// ---------------------------------------------------------------- grouped GEMM

// One block's problem: c[m0 .., n0 ..] of c (m x n, row stride ldc) = A (m x K) B (K x n), where
// A(i, q) = a[A_KM ? q * lda + i : i * lda + q] and B(q, j) = b[B_KN ? q * ldb + j : j * ldb + q].
template <class T, class TC>
struct Problem {
  const T* a;
  const T* b;
  TC* c;
  int64_t lda, ldb, ldc;
  int m, n, k, m0, n0;
  const T* a2;  // the second product's operands (Launch::a2), or null
  const T* b2;
};

// The launch: mode 0 (rows grouped: m = the expert's rows, n and K fixed) or 1 (wgrad: m = n1, n
// = n2 fixed, K = the expert's rows, c one [n1, n2] matrix per expert).
template <class T, class TC>
struct Launch {
  const T* a;
  const T* b;
  TC* c;
  const int32_t* offsets;
  int64_t lda, ldb, ldc, b_stride;
  int e, m, n, k, tiles_n, tiles_m;
  int wgrad;
  float alpha = 1.0f;    // c = alpha * the product (+ c when accumulate)
  int accumulate = 0;
  int pair_store = 0;    // two adjacent columns stored as one 4- or 8-byte word (c and ldc allow it)
  // Rows grouped only: a second product a2_e B2_e (a2 [R, k2] row stride lda2, B2 laid out as B with
  // ldb2, b2_stride a matrix) summed into the same accumulators after the first one's K tiles: a
  // LoRA adapter's term as K tiles past the base's, one rounding, no second pass over c.
  const T* a2 = nullptr;
  const T* b2 = nullptr;
  int64_t lda2 = 0, ldb2 = 0, b2_stride = 0;
  int k2 = 0;
};

// The epilogue's value of one element: alpha times its sum, plus what c holds when accumulating.
template <class T, class TC>
__device__ __forceinline__ float epilogue_value(const Launch<T, TC>& L, const TC* c, int64_t i, float acc) {
  const float v = L.alpha * acc;
  return L.accumulate ? v + load_t(c, i) : v;
}

// Two adjacent elements i, i + 1 (i even, c's words aligned: Launch::pair_store) rounded as
// store_t rounds them, written as one word.
template <class TC> __device__ __forceinline__ void store_pair(TC* c, int64_t i, float v0, float v1) {
  if constexpr (std::is_same_v<TC, float>) {
    *reinterpret_cast<float2*>(c + i) = make_float2(v0, v1);
  } else if constexpr (std::is_same_v<TC, __nv_bfloat16>) {
    *reinterpret_cast<uint32_t*>(c + i) = uint32_t(f32_to_bf16_bits(v0)) | (uint32_t(f32_to_bf16_bits(v1)) << 16);
  } else {
    *reinterpret_cast<__half2*>(c + i) = __halves2half2(__float2half_rn(v0), __float2half_rn(v1));
  }
}

// Finds this block's problem; false when the block has no tile (the grid covers the worst case).
// Rows grouped: the first warp walks the experts 32 at a time (each lane one expert's row tiles,
// a warp prefix sum, a ballot for the expert whose tiles hold this block's), so a block pays a
// few dependent reads of the offsets rather than one per expert before it.
template <int BM, int BN, class T, class TC>
__device__ bool locate(const Launch<T, TC>& L, Problem<T, TC>& p) {
  __shared__ int s_e, s_t;
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    int t = int(blockIdx.x), found = -1;
    if (L.wgrad) {
      found = t / (L.tiles_m * L.tiles_n);
      t -= found * L.tiles_m * L.tiles_n;
      if (found >= L.e) found = -1;
    } else {
      const int mt = t / L.tiles_n;
      int before = 0;  // row tiles of the experts already walked
      for (int x0 = 0; x0 < L.e && found < 0; x0 += 32) {
        const int x = x0 + lane;
        const int tiles = x < L.e ? (L.offsets[x + 1] - L.offsets[x] + BM - 1) / BM : 0;
        int incl = tiles;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int v = __shfl_up_sync(0xffffffffu, incl, d);
          if (lane >= d) incl += v;
        }
        const int first = before + incl - tiles;  // this lane's expert's first tile
        const unsigned hit = __ballot_sync(0xffffffffu, mt >= first && mt < first + tiles);
        if (hit) {
          const int src = __ffs(hit) - 1;
          found = x0 + src;
          t = (mt - __shfl_sync(0xffffffffu, first, src)) * L.tiles_n + t % L.tiles_n;
        }
        before += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
    if (lane == 0) s_e = found, s_t = t;
  }
  __syncthreads();
  const int x = s_e, t = s_t;
  if (x < 0) return false;
  const int64_t row0 = L.offsets[x], rows = L.offsets[x + 1] - row0;
  if (L.wgrad) {
    p.a = L.a + row0 * L.lda;
    p.b = L.b + row0 * L.ldb;
    p.c = L.c + int64_t(x) * L.m * L.n;
    p.m = L.m, p.n = L.n, p.k = int(rows);
    p.m0 = (t / L.tiles_n) * BM;
  } else {
    p.a = L.a + row0 * L.lda;
    p.b = L.b + int64_t(x) * L.b_stride;
    p.c = L.c + row0 * L.ldc;
    p.m = int(rows), p.n = L.n, p.k = L.k;
    p.m0 = (t / L.tiles_n) * BM;
    if (L.a2) p.a2 = L.a2 + row0 * L.lda2, p.b2 = L.b2 + int64_t(x) * L.b2_stride;
  }
  p.n0 = (t % L.tiles_n) * BN;
  p.lda = L.lda, p.ldb = L.ldb, p.ldc = L.ldc;
  return true;
}

namespace mma_gemm {

// BN: the tile's columns, 128 or (LEANTRAIN_MOE_GEMM_BN=256, for outputs at least that wide) 256;
// the 8 warps tile it 2 x 4, each 64 rows by BN / 4 columns.
// BK: the K depth of a stage, 64 (half the barriers a K of 32, 128-byte row segments from memory:
// 16% less time than 32 on the expert products of a Qwen3-30B-A3B layer on an H100) or 32
// (LEANTRAIN_MOE_GEMM_BK=32, and where 16-byte loads are not possible).
constexpr int BM = 128, PAD = 8, THREADS = 256;

template <bool KM, int BK> constexpr int a_rows() { return KM ? BK : BM; }
template <bool KM, int BK> constexpr int a_ld() { return KM ? BM + PAD : BK + PAD; }
template <bool KN, int BN, int BK> constexpr int b_rows() { return KN ? BK : BN; }
template <bool KN, int BN, int BK> constexpr int b_ld() { return KN ? BN + PAD : BK + PAD; }

// Loads a tile of a "major x minor" operand stored with `minor` contiguous: rows r of the tile
// are elements (major0 + r) of the major dim, columns the minor dim from minor0.
template <bool VEC, class T>
__device__ __forceinline__ void load_tile(T* s, int ld, int rows, int cols, const T* g, int64_t ldg, int major0,
                                          int major_n, int minor0, int minor_n) {
  if (VEC) {
    const int chunks = rows * cols / 8;
    for (int q = threadIdx.x; q < chunks; q += THREADS) {
      const int r = q / (cols / 8), c8 = (q % (cols / 8)) * 8;
      const int gr = major0 + r, gc = minor0 + c8;
      const bool ok = gr < major_n && gc < minor_n;
      mma::cp_async16(s + r * ld + c8, ok ? g + int64_t(gr) * ldg + gc : g, ok);
    }
  } else {
    for (int q = threadIdx.x; q < rows * cols; q += THREADS) {
      const int r = q / cols, c = q % cols;
      const int gr = major0 + r, gc = minor0 + c;
      s[r * ld + c] = gr < major_n && gc < minor_n ? g[int64_t(gr) * ldg + gc] : from_f32<T>(0.f);
    }
  }
}

// Elements of one pipeline stage (an A tile and a B tile) in shared memory.
template <bool A_KM, bool B_KN, int BN, int BK>
constexpr int stage_elems() {
  return a_rows<A_KM, BK>() * a_ld<A_KM, BK>() + b_rows<B_KN, BN, BK>() * b_ld<B_KN, BN, BK>();
}

// STAGES tiles of K in flight (cp.async): tile kt + STAGES - 1 is requested while tile kt is
// multiplied. 3 is the default (LEANTRAIN_MOE_GEMM_STAGES: 2, 3, or 4 with 32-deep stages); a stage
// is 37 KB of shared memory 64 deep, 20 KB 32 deep. The sums run in the same order whatever STAGES is.
template <class T, class TC, bool A_KM, bool B_KN, bool VEC, int STAGES, int BN, int BK>
__global__ void __launch_bounds__(THREADS) kernel(Launch<T, TC> L) {
  constexpr int WN = BN / 4, NT = WN / 8;  // a warp's columns, and its n8 MMA tiles
  Problem<T, TC> p;
  p.a2 = p.b2 = nullptr;
  if (!locate<BM, BN>(L, p)) return;
  constexpr int A_ELEMS = a_rows<A_KM, BK>() * a_ld<A_KM, BK>();
  constexpr int SE = stage_elems<A_KM, B_KN, BN, BK>();
  extern __shared__ __align__(16) unsigned char moe_smem[];
  T(*smem)[SE] = reinterpret_cast<T(*)[SE]>(moe_smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp & 1, wn = warp >> 1;
  // K tiles [0, kt1) are the first product's, [kt1, kt_n) the second's (Launch::a2).
  const int kt1 = (p.k + BK - 1) / BK;
  const int kt_n = kt1 + (p.a2 ? (L.k2 + BK - 1) / BK : 0);
  auto load = [&](int stage, int kt) {
    T* As = smem[stage];
    T* Bs = smem[stage] + A_ELEMS;
    const bool second = kt >= kt1;
    const T* a = second ? p.a2 : p.a;
    const T* b = second ? p.b2 : p.b;
    const int64_t lda = second ? L.lda2 : p.lda, ldb = second ? L.ldb2 : p.ldb;
    const int kk = second ? L.k2 : p.k, k0 = (second ? kt - kt1 : kt) * BK;
    if (A_KM) load_tile<VEC>(As, a_ld<A_KM, BK>(), BK, BM, a, lda, k0, kk, p.m0, p.m);
    else load_tile<VEC>(As, a_ld<A_KM, BK>(), BM, BK, a, lda, p.m0, p.m, k0, kk);
    if (B_KN) load_tile<VEC>(Bs, b_ld<B_KN, BN, BK>(), BK, BN, b, ldb, k0, kk, p.n0, p.n);
    else load_tile<VEC>(Bs, b_ld<B_KN, BN, BK>(), BN, BK, b, ldb, p.n0, p.n, k0, kk);
  };
  float acc[4][NT][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
  if constexpr (STAGES == 2) {  // the default: tile kt + 1 requested before waiting for tile kt
    if (kt_n > 0) {
      load(0, 0);
      mma::cp_async_commit();
    }
  } else {
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < kt_n) load(st, st);
      mma::cp_async_commit();
    }
  }
  for (int kt = 0; kt < kt_n; ++kt) {
    if constexpr (STAGES == 2) {
      if (kt + 1 < kt_n) {
        load((kt + 1) & 1, kt + 1);
        mma::cp_async_commit();
        mma::cp_async_wait<1>();
      } else {
        mma::cp_async_wait<0>();
      }
      __syncthreads();
    } else {
      mma::cp_async_wait<STAGES - 2>();  // tile kt has landed (one group committed per tile)
      __syncthreads();                   // ...for every thread; and tile kt - 1's slot is free
      const int next = kt + STAGES - 1;
      if (next < kt_n) load(next % STAGES, next);
      mma::cp_async_commit();
    }
    const T* As = smem[kt % STAGES];
    const T* Bs = smem[kt % STAGES] + A_ELEMS;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[4][4], bf[NT / 2][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const int r0 = wm * 64 + mt * 16;
        if (A_KM)
          mma::ldsm_x4_trans(af[mt], As + (kk + (lane & 7) + ((lane >> 4) & 1) * 8) * a_ld<A_KM, BK>() + r0 +
                                         ((lane >> 3) & 1) * 8);
        else
          mma::ldsm_x4(af[mt], As + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * a_ld<A_KM, BK>() + kk + (lane >> 4) * 8);
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int c0 = wn * WN + np * 16;
        if (B_KN)
          mma::ldsm_x4_trans(bf[np], Bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * b_ld<B_KN, BN, BK>() + c0 +
                                         (lane >> 4) * 8);
        else
          mma::ldsm_x4(bf[np], Bs + (c0 + (lane & 7) + (lane >> 4) * 8) * b_ld<B_KN, BN, BK>() + kk + ((lane >> 3) & 1) * 8);
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mma::mma16816<T>(acc[mt][nt], af[mt], bf[nt >> 1][(nt & 1) * 2], bf[nt >> 1][(nt & 1) * 2 + 1]);
    }
    if constexpr (STAGES == 2) __syncthreads();  // buffer kt & 1 is refilled next iteration, before the wait
  }
  // Each thread holds pairs of adjacent columns (2 t4, 2 t4 + 1): one word a pair where c allows.
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = p.m0 + wm * 64 + mt * 16 + g + h * 8;
        const int c = p.n0 + wn * WN + nt * 8 + 2 * t4;
        if (r >= p.m || c >= p.n) continue;
        const int64_t i = int64_t(r) * p.ldc + c;
        const float v0 = epilogue_value(L, p.c, i, acc[mt][nt][2 * h]);
        if (c + 1 < p.n) {
          const float v1 = epilogue_value(L, p.c, i + 1, acc[mt][nt][2 * h + 1]);
          if (L.pair_store) store_pair(p.c, i, v0, v1);
          else store_t(p.c, i, v0), store_t(p.c, i + 1, v1);
        } else {
          store_t(p.c, i, v0);
        }
      }
}

}  // namespace mma_gemm

namespace simt_gemm {

constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256;

template <class T, class TC, bool A_KM, bool B_KN>
__global__ void __launch_bounds__(THREADS) kernel(Launch<T, TC> L) {
  Problem<T, TC> p;
  if (!locate<BM, BN>(L, p)) return;
  __shared__ float As[BK][BM + 1], Bs[BK][BN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < p.k; k0 += BK) {
    for (int q = threadIdx.x; q < BK * BM; q += THREADS) {
      const int kk = q / BM, i = q % BM, gi = p.m0 + i, gk = k0 + kk;
      As[kk][i] = gi < p.m && gk < p.k ? load_t(p.a, A_KM ? int64_t(gk) * p.lda + gi : int64_t(gi) * p.lda + gk) : 0.f;
    }
    for (int q = threadIdx.x; q < BK * BN; q += THREADS) {
      const int kk = q / BN, j = q % BN, gj = p.n0 + j, gk = k0 + kk;
      Bs[kk][j] = gj < p.n && gk < p.k ? load_t(p.b, B_KN ? int64_t(gk) * p.ldb + gj : int64_t(gj) * p.ldb + gk) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(As[kk][ty + 16 * i], Bs[kk][tx + 16 * j], acc[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = p.m0 + ty + 16 * i, c = p.n0 + tx + 16 * j;
      if (r < p.m && c < p.n) store_t(p.c, int64_t(r) * p.ldc + c, epilogue_value(L, p.c, int64_t(r) * p.ldc + c, acc[i][j]));
    }
}

}  // namespace simt_gemm

// Runs one grouped launch: the tensor-core kernel for 16-bit operands (vector loads when every
// row and pointer allows 16-byte chunks), the SIMT kernel for f32.
template <class T, class TC, bool A_KM, bool B_KN, class F>
void run_grouped(Launch<T, TC> L, F worst_row_tiles_m, int minor_a, int minor_b) {
  cudaStream_t s = current_stream();
  if constexpr (std::is_same_v<T, float>) {
    using namespace simt_gemm;
    L.tiles_n = (L.n + BN - 1) / BN;
    L.tiles_m = (L.m + BM - 1) / BM;
    const int64_t blocks = L.wgrad ? int64_t(L.e) * L.tiles_m * L.tiles_n
                                   : ((worst_row_tiles_m(BM)) + L.e) * int64_t(L.tiles_n);
    if (blocks > 0) kernel<T, TC, A_KM, B_KN><<<unsigned(blocks), THREADS, 0, s>>>(L);
  } else {
    using namespace mma_gemm;
    const bool vec = rk::aligned16(L.a) && rk::aligned16(L.b) && L.lda % 8 == 0 && L.ldb % 8 == 0 && L.b_stride % 8 == 0 &&
                     minor_a % 8 == 0 && minor_b % 8 == 0;
    // Pairs of columns land on word boundaries: c's first element, every row start and (wgrad)
    // every expert's matrix at an even element.
    L.pair_store = reinterpret_cast<uintptr_t>(L.c) % (2 * sizeof(TC)) == 0 && L.ldc % 2 == 0 &&
                   (!L.wgrad || (int64_t(L.m) * L.n) % 2 == 0);
    static const int stages = int(knob_int("LEANTRAIN_MOE_GEMM_STAGES"));
    static const int wide = int(knob_int("LEANTRAIN_MOE_GEMM_BN"));
    static const int deep = int(knob_int("LEANTRAIN_MOE_GEMM_BK"));
    // std::integral_constant<int, STAGES>, <int, BN>, <int, BK>
    auto launch = [&](auto stages_c, auto bn_c, auto bk_c) {
      constexpr int st = decltype(stages_c)::value, bn = decltype(bn_c)::value, bk = decltype(bk_c)::value;
      L.tiles_n = (L.n + bn - 1) / bn;
      L.tiles_m = (L.m + BM - 1) / BM;
      const int64_t blocks = L.wgrad ? int64_t(L.e) * L.tiles_m * L.tiles_n
                                     : ((worst_row_tiles_m(BM)) + L.e) * int64_t(L.tiles_n);
      if (blocks <= 0) return;
      auto kern = kernel<T, TC, A_KM, B_KN, true, st, bn, bk>;
      if constexpr (bn == 128 && bk == 32) {  // the other shapes are compiled for 16-byte loads only (binary size)
        if (!vec) kern = kernel<T, TC, A_KM, B_KN, false, st, bn, bk>;
      }
      const size_t smem = size_t(st) * stage_elems<A_KM, B_KN, bn, bk>() * sizeof(T);
      allow_smem(kern, smem);  // past the default limit with 3 and 4 stages, 256 columns or 64 deep
      kern<<<unsigned(blocks), THREADS, smem, s>>>(L);
    };
    using K32 = std::integral_constant<int, 32>;
    using K64 = std::integral_constant<int, 64>;
    using N128 = std::integral_constant<int, 128>;
    // 256 columns a tile only where the output is that wide (an adapter's rank-r product is not),
    // the loads are 16-byte ones, and 2 or 3 stages are asked for (fewer kernels in the binary);
    // 64 deep likewise for 16-byte loads and 2 or 3 stages, with 128 columns.
    auto with_shape = [&](auto stages_c) {
      if constexpr (decltype(stages_c)::value <= 3) {
        if (deep == 64 && vec) return launch(stages_c, N128{}, K64{});
        if (wide == 256 && L.n >= 256 && vec) return launch(stages_c, std::integral_constant<int, 256>{}, K32{});
      }
      launch(stages_c, N128{}, K32{});
    };
    if (stages == 4) with_shape(std::integral_constant<int, 4>{});
    else if (stages == 3) with_shape(std::integral_constant<int, 3>{});
    else with_shape(std::integral_constant<int, 2>{});
  }
  LT_CUDA_LAUNCH_CHECK("grouped_gemm");
}

// grouped_gemm's launch (rows grouped): c_e = alpha a_e w_e (+ c with accumulate); with a2 defined
// (16-bit only: the tensor-core kernel), a2_e w2_e too as K tiles after the first product's, w2
// laid out as w (grouped_gemm_pair checks that, and 16-byte loads for the second product).
void launch_rows_grouped(const Tensor& c, const Tensor& a, const Tensor& w, bool trans_w, const Tensor& offsets,
                         float alpha, bool accumulate, const Tensor& a2 = Tensor(), const Tensor& w2 = Tensor()) {
  const int64_t r = a.size(0);
  const int e = int(w.size(0)), kdim = int(a.size(1)), n = int(c.size(1));
  if (r == 0 || n == 0) return;
  LT_ASSERT(!a2.defined() || a.dtype() != DType::F32);
  auto row_tiles = [r](int bm) { return (r + bm - 1) / bm; };
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Launch<T, T> L{a.data<T>(), w.data<T>(), c.data<T>(), offsets.data<int32_t>(), kdim, trans_w ? kdim : n, n,
                   w.size(1) * w.size(2), e, 0, n, kdim, 0, 0, 0, alpha, accumulate ? 1 : 0};
    if (a2.defined()) {
      L.a2 = a2.data<T>(), L.b2 = w2.data<T>(), L.k2 = int(a2.size(1));
      L.lda2 = L.k2, L.ldb2 = trans_w ? L.k2 : n, L.b2_stride = w2.size(1) * w2.size(2);
    }
    // trans_w: w_e [n, K] (K contiguous: B stored [N][K]); else w_e [K, n] (B stored [K][N]).
    if (trans_w) run_grouped<T, T, false, false>(L, row_tiles, kdim, kdim);
    else run_grouped<T, T, false, true>(L, row_tiles, kdim, n);
  });
}

// The CUDA kernels of one device (each launch on that device's current stream).
class CudaMoeKernels final : public MoeKernels {
 public:
  explicit CudaMoeKernels(int device) : device_(device) {}
  const char* name() const override { return "cuda"; }
#define LT_MOE_OP(ret, op, params, args) ret op params override;
#include "backend/moe_ops.def"

 private:
  int device_;
};

}  // namespace

MoeKernels& cuda_moe_kernels(int device_index) {
  static std::vector<std::unique_ptr<CudaMoeKernels>> all(64);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  LT_CHECK(device_index >= 0 && device_index < int(all.size()), "CUDA device " + std::to_string(device_index),
           "the MoE kernels serve devices 0 .. 63", "use a device below 64");
  if (!all[size_t(device_index)]) all[size_t(device_index)] = std::make_unique<CudaMoeKernels>(device_index);
  return *all[size_t(device_index)];
}

void CudaMoeKernels::moe_route_fwd(const Tensor& weights, const Tensor& idx, const Tensor& probs, const Tensor& logits,
                                bool renorm) {
  DeviceGuard guard(device_);
  const int n = int(logits.size(0)), e = int(logits.size(1)), k = int(idx.size(1));
  LT_CHECK(k <= 32 && probs.dtype() == DType::F32, "moe_route on CUDA: top " + std::to_string(k),
           "the CUDA router keeps at most 32 picks a token in registers", "route each token to at most 32 experts");
  if (n == 0) return;
  dispatch_float(logits.dtype(), [&](auto ltag) {
    using L = decltype(ltag);
    dispatch_float(weights.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      route_fwd_kernel<L, W><<<blocks_for(int64_t(n) * 32, 256), 256, 0, current_stream()>>>(
          weights.data<W>(), idx.data<int32_t>(), probs.data<float>(), logits.data<L>(), n, e, k, renorm);
    });
  });
  LT_CUDA_LAUNCH_CHECK("moe_route_fwd");
}

void CudaMoeKernels::moe_route_bwd(const Tensor& dlogits, const Tensor& dweights, const Tensor& probs, const Tensor& idx,
                                bool renorm, const Tensor& aux, const Tensor& token_mask) {
  DeviceGuard guard(device_);
  const int n = int(probs.size(0)), e = int(probs.size(1)), k = int(idx.size(1));
  if (n == 0) return;
  dispatch_float(dlogits.dtype(), [&](auto ltag) {
    using L = decltype(ltag);
    dispatch_float(dweights.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      route_bwd_kernel<L, W><<<blocks_for(int64_t(n) * 32, 256), 256, 0, current_stream()>>>(
          dlogits.data<L>(), dweights.data<W>(), probs.data<float>(), idx.data<int32_t>(), n, e, k, renorm,
          aux.defined() ? aux.data<float>() : nullptr, token_mask.defined() ? token_mask.data<uint8_t>() : nullptr);
    });
  });
  LT_CUDA_LAUNCH_CHECK("moe_route_bwd");
}

void CudaMoeKernels::moe_route_stats(const Tensor& psum, const Tensor& counts, const Tensor& probs, const Tensor& idx,
                                  const Tensor& token_mask) {
  DeviceGuard guard(device_);
  const int n = int(probs.size(0)), e = int(probs.size(1)), k = int(idx.size(1));
  route_stats_kernel<<<unsigned(e), 256, 0, current_stream()>>>(psum.data<float>(), counts.data<float>(),
                                                                probs.data<float>(), idx.data<int32_t>(), n, e, k,
                                                                token_mask.defined() ? token_mask.data<uint8_t>() : nullptr);
  LT_CUDA_LAUNCH_CHECK("moe_route_stats");
}

void CudaMoeKernels::moe_sort(const Tensor& offsets, const Tensor& rows, const Tensor& pos, const Tensor& idx) {
  DeviceGuard guard(device_);
  const int r = int(idx.numel()), e = int(offsets.numel() - 1);
  // Warps of per-warp histograms that fit 48 KB of shared memory with the totals.
  const int warps = std::max(1, std::min(32, (12 * 1024) / e - 1));
  const size_t smem = size_t(warps + 1) * size_t(e) * sizeof(int32_t);
  sort_kernel<<<1, unsigned(warps * 32), smem, current_stream()>>>(offsets.data<int32_t>(), rows.data<int32_t>(),
                                                                  pos.data<int32_t>(), idx.data<int32_t>(), r, e);
  LT_CUDA_LAUNCH_CHECK("moe_sort");
}

void CudaMoeKernels::moe_gather(const Tensor& out, const Tensor& x, const Tensor& rows, int64_t k) {
  DeviceGuard guard(device_);
  const int64_t r = out.size(0), bytes = out.size(1) * int64_t(dtype_size(x.dtype()));
  if (r == 0 || bytes == 0) return;
  cudaStream_t s = current_stream();
  if (bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(x.raw_data()) & 15) == 0 &&
      (reinterpret_cast<uintptr_t>(out.raw_data()) & 15) == 0) {
    const int64_t units = bytes / 16;
    gather_kernel<uint4><<<blocks_for(r * units, 256), 256, 0, s>>>(
        static_cast<uint4*>(out.raw_data()), static_cast<const uint4*>(x.raw_data()), rows.data<int32_t>(), r, units, int(k));
  } else if (bytes % 4 == 0) {
    const int64_t units = bytes / 4;
    gather_kernel<uint32_t><<<blocks_for(r * units, 256), 256, 0, s>>>(static_cast<uint32_t*>(out.raw_data()),
                                                                       static_cast<const uint32_t*>(x.raw_data()),
                                                                       rows.data<int32_t>(), r, units, int(k));
  } else {
    const int64_t units = bytes / 2;
    gather_kernel<uint16_t><<<blocks_for(r * units, 256), 256, 0, s>>>(static_cast<uint16_t*>(out.raw_data()),
                                                                       static_cast<const uint16_t*>(x.raw_data()),
                                                                       rows.data<int32_t>(), r, units, int(k));
  }
  LT_CUDA_LAUNCH_CHECK("moe_gather");
}

void CudaMoeKernels::moe_gather_bwd(const Tensor& dx, const Tensor& dout, const Tensor& pos, int64_t k) {
  DeviceGuard guard(device_);
  const int64_t n = dx.size(0), c = dx.size(1);
  if (n * c == 0) return;
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gather_bwd_kernel<T><<<blocks_for(n * c, 256), 256, 0, current_stream()>>>(dx.data<T>(), dout.data<T>(),
                                                                               pos.data<int32_t>(), n, c, int(k));
  });
  LT_CUDA_LAUNCH_CHECK("moe_gather_bwd");
}

void CudaMoeKernels::grouped_gemm(const Tensor& c, const Tensor& a, const Tensor& w, bool trans_w, const Tensor& offsets,
                                  float alpha, bool accumulate) {
  DeviceGuard guard(device_);
  launch_rows_grouped(c, a, w, trans_w, offsets, alpha, accumulate);
}

void CudaMoeKernels::grouped_gemm_pair(const Tensor& c, const Tensor& a, const Tensor& w, bool trans_w,
                                       const Tensor& a2, const Tensor& w2, bool trans_w2, const Tensor& offsets) {
  DeviceGuard guard(device_);
  // One launch where both products share a layout and 16-byte loads (the tensor-core kernel's K
  // tiles run on into the second product; run_grouped's 16-byte test covers the first product,
  // this one the second); else the first product, then the second added.
  const int64_t k2 = a2.size(1), ldb2 = trans_w2 ? k2 : c.size(1);
  // LEANTRAIN_MOE_GEMM_PAIR=0: always two launches (kept for comparison).
  const bool fused = knob_on("LEANTRAIN_MOE_GEMM_PAIR") && trans_w == trans_w2 && a.dtype() != DType::F32 &&
                     rk::aligned16(a2.raw_data()) && rk::aligned16(w2.raw_data()) && k2 % 8 == 0 && ldb2 % 8 == 0 &&
                     (w2.size(1) * w2.size(2)) % 8 == 0;
  if (fused) return launch_rows_grouped(c, a, w, trans_w, offsets, 1.0f, false, a2, w2);
  launch_rows_grouped(c, a, w, trans_w, offsets, 1.0f, false);
  launch_rows_grouped(c, a2, w2, trans_w2, offsets, 1.0f, true);
}

void CudaMoeKernels::grouped_gemm_wgrad(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& offsets,
                                        float alpha) {
  DeviceGuard guard(device_);
  const int e = int(c.size(0)), n1 = int(c.size(1)), n2 = int(c.size(2));
  if (int64_t(e) * n1 * n2 == 0) return;
  auto none = [](int) { return int64_t(0); };
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto ctag) {
      using TC = decltype(ctag);
      // c_e = a_e^T b_e: A stored [K][M] (rows of a), B stored [K][N] (rows of b).
      Launch<T, TC> L{a.data<T>(), b.data<T>(), c.data<TC>(), offsets.data<int32_t>(), n1, n2, n2, 0, e, n1, n2, 0, 0, 0, 1, alpha};
      run_grouped<T, TC, true, true>(L, none, n1, n2);
    };
    if (c.dtype() == DType::F32) go(float{});
    else go(T{});
  });
}

void CudaMoeKernels::moe_combine(const Tensor& out, const Tensor& ys, const Tensor& w, const Tensor& idx, const Tensor& pos) {
  DeviceGuard guard(device_);
  const int64_t n = out.size(0), c = out.size(1);
  const int k = int(idx.size(1));
  LT_CHECK(k <= 64, "moe_combine on CUDA: " + std::to_string(k) + " experts a token",
           "the combine orders at most 64 slots a token", "route each token to at most 64 experts");
  if (n == 0 || c == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(w.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      constexpr int P = rk::kVec<T>;
      if (c % P == 0 && rk::aligned16(out.data<T>()) && rk::aligned16(ys.data<T>()))
        combine_vec_kernel<T, W, P><<<unsigned(n), 256, 0, current_stream()>>>(
            out.data<T>(), ys.data<T>(), w.data<W>(), idx.data<int32_t>(), pos.data<int32_t>(), c, k);
      else
        combine_kernel<T, W><<<unsigned(n), 256, 0, current_stream()>>>(out.data<T>(), ys.data<T>(), w.data<W>(),
                                                                       idx.data<int32_t>(), pos.data<int32_t>(), c, k);
    });
  });
  LT_CUDA_LAUNCH_CHECK("moe_combine");
}

void CudaMoeKernels::moe_combine_bwd(const Tensor& dys, const Tensor& dw, const Tensor& dout, const Tensor& ys,
                                  const Tensor& w, const Tensor& pos) {
  DeviceGuard guard(device_);
  const int64_t n = dout.size(0), c = dout.size(1);
  const int k = int(w.size(1));
  if (n == 0) return;
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(w.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      constexpr int P = rk::kVec<T>;
      if (c % P == 0 && rk::aligned16(dys.data<T>()) && rk::aligned16(dout.data<T>()) && rk::aligned16(ys.data<T>()))
        combine_bwd_vec_kernel<T, W, P><<<unsigned(n), 256, 0, current_stream()>>>(
            dys.data<T>(), dw.data<W>(), dout.data<T>(), ys.data<T>(), w.data<W>(), pos.data<int32_t>(), c, k);
      else
        combine_bwd_kernel<T, W><<<unsigned(n), 256, 0, current_stream()>>>(dys.data<T>(), dw.data<W>(), dout.data<T>(),
                                                                           ys.data<T>(), w.data<W>(), pos.data<int32_t>(),
                                                                           c, k);
    });
  });
  LT_CUDA_LAUNCH_CHECK("moe_combine_bwd");
}

namespace {

// nf4_dequantize_pieces: quant.cu's nf4_dequantize_nested_kernel with blockIdx.y the piece (its
// offset from the launch's list): one thread per 4 code bytes, 8 values each, the block's absmax
// decoded in the thread, the maps in shared memory. Up to kNf4PieceLaunch pieces a launch (the
// offsets travel in the kernel's parameters, beside the 256-entry map).
constexpr int kNf4PieceLaunch = 256;
constexpr int kNf4Threads = 256;

struct Nf4PieceArgs {
  float map[256];
  float offsets[kNf4PieceLaunch];
};

template <class T>
__global__ void nf4_pieces_kernel(T* out, const uint8_t* codes, const uint8_t* absmax_codes, const float* nested_absmax,
                                  int64_t n, int64_t code_stride, int64_t absmax_stride, int64_t nested_stride,
                                  bool vector, Nf4PieceArgs args) {
  __shared__ float smap[256];
  __shared__ float lut[16];
  smap[threadIdx.x] = args.map[threadIdx.x];
  if (threadIdx.x < 16) lut[threadIdx.x] = nf4_value(int(threadIdx.x));
  __syncthreads();
  const int p = int(blockIdx.y);
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i0 = 8 * g;  // 8 values, inside one 64-block
  if (i0 >= n) return;
  out += int64_t(p) * n;
  codes += int64_t(p) * code_stride;
  absmax_codes += int64_t(p) * absmax_stride;
  nested_absmax += int64_t(p) * nested_stride;
  const int64_t block = i0 / kNf4Block;
  const float a =
      __fadd_rn(__fmul_rn(smap[absmax_codes[block]], nested_absmax[block / kNf4NestedBlock]), args.offsets[p]);
  nf4_decode8(out, codes, g, n, a, lut, vector);
}

}  // namespace

void CudaMoeKernels::nf4_dequantize_pieces(const Tensor& out, const Tensor& codes, const Tensor& absmax_codes,
                                           const Tensor& nested_absmax, std::span<const float> offsets,
                                           std::span<const float> map) {
  DeviceGuard guard(device_);
  const int64_t p = out.size(0), n = out.size(1);
  const int64_t blocks = nf4_blocks(n);
  LT_CHECK(out.dim() == 2 && out.is_contiguous() && int64_t(offsets.size()) == p && map.size() == 256,
           "nf4_dequantize_pieces: out " + shape_str(out.shape()) + ", " + std::to_string(offsets.size()) + " offsets, a map of " +
               std::to_string(map.size()),
           "a contiguous [pieces, n] output, one offset per piece and 256 map entries", "pass an Nf4Stack's rows");
  for (const Tensor* t : {&codes, &absmax_codes, &nested_absmax})
    LT_CHECK(t->dim() == 2 && t->size(0) == p && t->strides()[1] == 1,
             "nf4_dequantize_pieces: a state tensor " + shape_str(t->shape()), "one contiguous row per piece",
             "pass an Nf4Stack's rows");
  LT_CHECK(codes.size(1) == nf4_bytes(n) && absmax_codes.size(1) == blocks && nested_absmax.size(1) == nf4_nested_blocks(blocks) &&
               codes.dtype() == DType::U8 && absmax_codes.dtype() == DType::U8 && nested_absmax.dtype() == DType::F32,
           "nf4_dequantize_pieces: codes " + shape_str(codes.shape()) + " for pieces of " + std::to_string(n) + " values",
           "the state must be sized for the pieces", "allocate it with nf4_bytes / nf4_blocks");
  if (p == 0 || n == 0) return;
  Nf4PieceArgs args;
  std::copy(map.begin(), map.end(), args.map);
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t p0 = 0; p0 < p; p0 += kNf4PieceLaunch) {
      const int64_t np = std::min<int64_t>(kNf4PieceLaunch, p - p0);
      std::copy(offsets.begin() + p0, offsets.begin() + p0 + np, args.offsets);
      T* o = out.data<T>() + p0 * n;
      const uint8_t* c = codes.data<uint8_t>() + p0 * codes.strides()[0];
      // Vector stores and loads when every piece's row starts aligned.
      const bool vector = reinterpret_cast<uintptr_t>(o) % sizeof(Nf4Pack8<T>) == 0 && n % 8 == 0 &&
                          reinterpret_cast<uintptr_t>(c) % 4 == 0 && codes.strides()[0] % 4 == 0;
      const dim3 grid(unsigned((n + 7) / 8 + kNf4Threads - 1) / kNf4Threads, unsigned(np));
      nf4_pieces_kernel<T><<<grid, kNf4Threads, 0, current_stream()>>>(
          o, c, absmax_codes.data<uint8_t>() + p0 * absmax_codes.strides()[0],
          nested_absmax.data<float>() + p0 * nested_absmax.strides()[0], n, codes.strides()[0], absmax_codes.strides()[0],
          nested_absmax.strides()[0], vector, args);
      LT_CUDA_LAUNCH_CHECK("nf4_dequantize_pieces");
    }
  });
}

}  // namespace lt
