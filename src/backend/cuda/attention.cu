// Flash-style attention: softmax(scale * Q K^T + mask) V without ever storing the Tq x Tk matrix.
//
// Forward (FlashAttention-2 scheme): a block owns 64 queries of one (batch, head), 16 per warp,
// and walks the key/value tiles (64 keys) once, double-buffered with cp.async. S = Q K^T and
// O += P V run on tensor cores (mma.sync m16n8k16, f32 accumulators); each row keeps a running
// max and sum (online softmax) in registers. Saved for backward: lse [B,H,Tq] f32 only.
//
// Backward (FlashAttention-2 recomputation, made deterministic without scratch):
//   1. delta_i = rowsum(dO_i * O_i) is written as one f32 into the first 4 bytes of dq's own
//      row i: dq has room (D >= 64 16-bit values) and is overwritten by step 3 anyway.
//   2. one block per 64-key tile loops over the query tiles that can see it, recomputes
//      P = exp(S - lse), and accumulates dV += P^T dO and dK += dS^T Q in registers.
//   3. one block per 64-query tile loops over the key tiles, reads its rows' delta first, then
//      accumulates dQ += dS K in registers and overwrites its own dq rows.
// No atomics, each output element is written once by one thread: results are reproducible.
//
// Masking: key j is visible to query i when mask[b, j] != 0 (if a mask is given) and, if
// causal, j <= i + Tk - Tq. Masked scores are -inf; a row with no visible key gets O = 0 and
// lse = +inf (as the CPU reference), so exp(s - lse) = 0 and it contributes no gradient (never NaN).
// The backward treats either infinity in lse as such an empty row.
// A sliding window and packed documents (Band) add a lower bound first(i) on the keys of query i;
// first() never decreases with i, so a query tile starts its key loop at first(its first row)
// and a key tile ends its query loop where first() passes the tile: the work is proportional to
// the visible keys (whole tiles outside the band are never loaded).
//
// Operands are [B, H, T, D] views with unit stride on D and any batch/head/time strides (Rows):
// the heads of a packed qkv [B, T, 3C] are read in place, and out, dq, dk, dv are written
// straight into [B, T, C] / [B, T, 3C] buffers. A row's D values stay contiguous, so every load
// and store is the one a contiguous operand gets; only the row base address is computed from strides.
//
// Grouped-query attention: k, v, dk, dv may have Hkv heads, Hkv dividing H; query head h reads kv
// head h / G (G = H / Hkv). Forward and dQ blocks own query tiles and read their kv head's rows.
// A dK/dV block (or warp) owns (batch, kv head, key tile) and walks the G query heads of its
// group in order, each over its query tiles, accumulating in registers (shared memory for the
// SIMT warps): K/V are never repeated, and every dK/dV element is still written once by one
// thread, in the same order every run. G = 1 is multi-head attention on the same code path.
//
// f32 with head dim 32/64/128 (16-byte aligned rows) takes register-tiled SIMT kernels (64-row
// blocks, 4 x 4 micro-tiles per thread, true f32 FMA); the switch is use_fast_f32_attention.
// Other f32 calls and 16-bit head dims other than 64/128 take a SIMT path (a warp owns 4 rows, lanes take
// 32 partners at a time from a transposed shared-memory chunk, f32 FMA throughout) with the
// same O(T) memory, the same three backward steps and the same semantics.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <type_traits>
#include <initializer_list>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma.cuh"
#include "core/knobs.h"

#include <cooperative_groups.h>

namespace lt {
using namespace cuda;
using namespace cuda::mma;

namespace {

constexpr int kThreads = 128;  // 4 warps; each warp owns 16 rows of the block's tile
constexpr int kBQ = 64;        // query rows per block (forward, dQ)
constexpr int kBK = 64;        // key rows per tile (forward, dQ) and per block (dK/dV)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Query rows per tile in the dK/dV kernel: fewer for D = 128 to keep accumulators in registers.
template <int D> constexpr int bwd_bq() { return D <= 64 ? 64 : 32; }

// Shared tiles are row-major with a row stride of D + 8 elements: the 16-byte skew puts the 8
// rows read by one ldmatrix phase in 8 different bank groups (no conflicts).
template <int D> constexpr int row_stride() { return D + 8; }

// Element strides of a [B, H, T, D] operand with unit stride on D: row (b, h, t) starts at
// b*sb + h*sh + t*st. Contiguous: sb = H*T*D, sh = T*D, st = D. The heads of a packed qkv
// [B, T, 3C] (and of out/dout [B, T, C]): sb = T*W, sh = D, st = W (W = 3C or C). Each row of D
// values stays contiguous, so the loads below are the same 16-byte / coalesced ones; only the
// row base address differs.
struct Rows {
  int64_t sb, sh, st;
  // Offset of row 0 of (b, h) = (bh / H, bh % H).
  __device__ __forceinline__ int64_t head(int64_t bh, int H) const {
    const int64_t b = bh / H;
    return b * sb + (bh - b * H) * sh;
  }
  // Offset of row 0 of the kv head that query head (b, h) = (bh / H, bh % H) reads: (b, h / G)
  // in a k or v operand of H / G heads. (The division by G is unsigned 32-bit: with it the
  // kernels keep the registers they had before GQA; a 64-bit one cost some of them 20 more.)
  __device__ __forceinline__ int64_t kv_head(int64_t bh, int H, int G) const {
    const int64_t b = bh / H;
    return b * sb + int64_t(unsigned(bh - b * H) / unsigned(G)) * sh;
  }
};

// The sliding window and packed documents: query i sees keys j >= first(i) (on top of the causal
// j <= i + off). doc holds this batch's doc_pos row (Tq == Tk there), window 0 means none. The
// front-end guarantees that first() never decreases with i (doc_pos restarts at 0 and counts up).
struct Band {
  const int32_t* doc;
  int window, off;
  __device__ __forceinline__ bool on() const { return doc != nullptr || window > 0; }
  __device__ __forceinline__ int first(int i) const {
    int lo = 0;
    if (window > 0) lo = max(lo, i + off - window + 1);
    if (doc) lo = max(lo, i - doc[i]);
    return lo;
  }
  // The first query in [qbeg, Tq) whose keys all lie at or after kend (binary search), or Tq:
  // queries from there on see nothing of keys < kend.
  __device__ int query_end(int kend, int qbeg, int Tq) const {
    if (!on()) return Tq;
    int lo = qbeg, hi = Tq;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (first(mid) >= kend) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
};
// The kernels' argument: doc_pos [B, Tq] (or nullptr) and the window.
struct BandArgs {
  const int32_t* doc;
  int window;
  __device__ __forceinline__ Band of(int b, int Tq, int off) const {
    return {doc ? doc + int64_t(b) * Tq : nullptr, window, off};
  }
};

// Rows [r0, r0 + R) of a [nrows, D] matrix (row stride ld) into a shared tile; rows past nrows become zeros.
template <class T, int D, int R>
__device__ __forceinline__ void tile_load_async(T* s, const T* g, int64_t ld, int r0, int nrows) {
  constexpr int CH = D / 8, LD = row_stride<D>();
  for (int i = threadIdx.x; i < R * CH; i += kThreads) {
    const int r = i / CH, ch = i - r * CH;
    const bool ok = r0 + r < nrows;
    cp_async16(s + r * LD + ch * 8, g + int64_t(ok ? r0 + r : 0) * ld + ch * 8, ok);
  }
}

// ldmatrix row addresses (see mma.cuh for the fragment layouts).
// A operand: the 16x16 block at (r0, c0) of a row-major tile. Also B via ldmatrix.trans from a
// tile that stores B as [k][n] (k rows r0.., n cols c0..): regs 0,1 = n-tile c0, regs 2,3 = c0 + 8.
template <int LD, class T> __device__ __forceinline__ const T* frag_a(const T* s, int r0, int c0, int lane) {
  return s + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c0 + (lane >> 4) * 8;
}
// B operand from a tile that stores B transposed ([n][k]): n rows n0..n0+15, k cols c0..c0+15;
// regs 0,1 = (b0, b1) of n-tile n0, regs 2,3 = of n-tile n0 + 8.
template <int LD, class T> __device__ __forceinline__ const T* frag_bt(const T* s, int n0, int c0, int lane) {
  return s + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + c0 + ((lane >> 3) & 1) * 8;
}

// C fragments of n-tiles 2kc, 2kc+1 (16 x 16 f32) -> A fragment of the next product.
template <class T> __device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// A warp writes its 16 x DC f32 accumulator (times mul[row half]) as T into its 16 rows of a
// shared tile (row stride that of head dim D), then copies those rows to global rows
// [row0, row0 + 16) (row stride ld) that are < nrows. DC < D: a block's share of the columns
// (the dK/dV kernel at D = 256), g pointing at its first.
template <class T, int D, int DC = D>
__device__ __forceinline__ void store_rows(T* stage, const float (&acc)[DC / 8][4], float mul0, float mul1, T* g,
                                           int64_t ld, int row0, int nrows, int lane) {
  constexpr int LD = row_stride<D>(), CH = DC / 8;
  const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int dt = 0; dt < DC / 8; ++dt) {
    *reinterpret_cast<uint32_t*>(stage + gq * LD + dt * 8 + 2 * t4) = pack2<T>(acc[dt][0] * mul0, acc[dt][1] * mul0);
    *reinterpret_cast<uint32_t*>(stage + (gq + 8) * LD + dt * 8 + 2 * t4) =
        pack2<T>(acc[dt][2] * mul1, acc[dt][3] * mul1);
  }
  __syncwarp();
  for (int i = lane; i < 16 * CH; i += 32) {
    const int r = i / CH, ch = i - r * CH;
    if (row0 + r < nrows)
      *reinterpret_cast<uint4*>(g + int64_t(row0 + r) * ld + ch * 8) =
          *reinterpret_cast<const uint4*>(stage + r * LD + ch * 8);
  }
}

// Zeros rows [row0, row0 + nr) ∩ [0, nrows) of a [nrows, D] matrix with row stride ld (whole block).
template <class T>
__device__ __forceinline__ void zero_rows(T* g, int64_t ld, int row0, int nr, int nrows, int D) {
  const int end = min(row0 + nr, nrows);
  for (int i = threadIdx.x; i < (end - row0) * D; i += blockDim.x) {
    const int r = i / D;
    g[int64_t(row0 + r) * ld + (i - r * D)] = from_f32<T>(0.0f);
  }
}

// ======================================================================== tensor-core forward

// Each warp owns MT m-tiles of 16 query rows (a block 64 * MT rows): every K and V fragment it
// loads from shared memory then feeds MT products instead of one, halving the shared-memory
// traffic per product at MT = 2 (FlashAttention-2's 128-row blocks for D = 64) at the price of
// registers (2 blocks per SM). MT = 1: D = 64 fits 4 blocks per SM by shared memory (46 KB each);
// ask for registers to match. D = 256 (Gemma 3, Qwen3.5) reads its Q fragments from shared memory
// at every key tile instead of holding them: 64 more registers next to the 128 of O would spill.
template <class T, int D, int MT>
__global__ void __launch_bounds__(kThreads, MT > 1 ? 2 : (D <= 64 ? 4 : (D <= 128 ? 2 : 1)))
    attn_fwd_mma(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ q, const T* __restrict__ k,
                 const T* __restrict__ v, const uint8_t* __restrict__ mask, Rows so, Rows sq, Rows sk, Rows sv, int H,
                 int G, int Tq, int Tk, bool causal, float sl2, BandArgs ba) {
  constexpr int LD = row_stride<D>(), BQ = kBQ * MT;
  extern __shared__ __align__(16) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);  // [BQ][LD]; later the output staging area
  T* Ks = Qs + BQ * LD;                // [2][kBK][LD]
  T* Vs = Ks + 2 * kBK * LD;           // [2][kBK][LD]
  __shared__ uint8_t ok_s[2][kBK];     // key in range and not padded

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t bh = blockIdx.x;
  const int b = int(bh / H);
  const int q0 = int(gridDim.y - 1 - blockIdx.y) * BQ;  // heaviest (causal) tiles first
  const int off = Tk - Tq;
  const T* qg = q + sq.head(bh, H);
  const T* kg = k + sk.kv_head(bh, H, G);
  const T* vg = v + sv.kv_head(bh, H, G);
  T* og = out + so.head(bh, H);
  float* lg = lse + bh * Tq;
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;

  // Keys [kbeg, kend) can be visible to some query of this block (kbeg a tile start).
  const Band band = ba.of(b, Tq, off);
  const int kbeg = band.on() ? band.first(q0) / kBK * kBK : 0;
  const int kend = causal ? min(Tk, q0 + BQ + off) : Tk;
  const int ntiles = kend > kbeg ? (kend - kbeg + kBK - 1) / kBK : 0;
  // The band's tightest bound in the block (tiles below it need the per-element check) and this
  // thread's rows' bounds.
  const int band_max = band.on() ? band.first(min(q0 + BQ, Tq) - 1) : 0;
  int lo_r[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      lo_r[mt][h] = band.on() ? band.first(min(q0 + warp * 16 * MT + 16 * mt + g + 8 * h, Tq - 1)) : 0;
  if (ntiles == 0) {  // no query of the block sees any key
    zero_rows(og, so.st, q0, BQ, Tq, D);
    for (int i = tid; i < BQ; i += kThreads)
      if (q0 + i < Tq) lg[q0 + i] = INFINITY;
    return;
  }
  auto load_kv = [&](int buf, int k0) {
    tile_load_async<T, D, kBK>(Ks + buf * kBK * LD, kg, sk.st, k0, Tk);
    tile_load_async<T, D, kBK>(Vs + buf * kBK * LD, vg, sv.st, k0, Tk);
    if (tid < kBK) {
      const int key = k0 + tid;
      ok_s[buf][tid] = key < Tk && (!mrow || mrow[key] != 0);
    }
  };
  tile_load_async<T, D, BQ>(Qs, qg, sq.st, q0, Tq);
  load_kv(0, kbeg);
  cp_async_commit();

  const int w0 = warp * 16 * MT;  // the warp's first row in the block; m-tile mt starts at w0 + 16 mt
  // This thread's two rows of m-tile mt: q0 + w0 + 16 mt + g and 8 below.
  constexpr bool kQRegs = D <= 128;
  uint32_t qf[MT][kQRegs ? D / 16 : 1][4];
  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int j = 0; j < ntiles; ++j) {
    const int buf = j & 1, k0 = kbeg + j * kBK;
    if (j + 1 < ntiles) load_kv(buf ^ 1, k0 + kBK);  // buffer buf^1 was released by the last barrier
    cp_async_commit();
    cp_async_wait<1>();  // everything but the group just committed has landed
    __syncthreads();
    if constexpr (kQRegs) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(qf[mt][kk], frag_a<LD>(Qs, w0 + 16 * mt, kk * 16, lane));
      }
    }
    const T* Kb = Ks + buf * kBK * LD;
    const T* Vb = Vs + buf * kBK * LD;

    float s[MT][kBK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < kBK / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (!kQRegs) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldsm_x4(qf[mt][0], frag_a<LD>(Qs, w0 + 16 * mt, kk * 16, lane));
      }
#pragma unroll
      for (int np = 0; np < kBK / 16; ++np) {
        uint32_t kb[4];
        ldsm_x4(kb, frag_bt<LD>(Kb, np * 16, kk * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(s[mt][2 * np], qf[mt][kQRegs ? kk : 0], kb[0], kb[1]);
          mma16816<T>(s[mt][2 * np + 1], qf[mt][kQRegs ? kk : 0], kb[2], kb[3]);
        }
      }
    }

    // Scale into log2 units and mask (only tiles that touch the diagonal, the band's edge, the end
    // or padding).
    const bool need_mask = mrow || k0 + kBK > Tk || (causal && k0 + kBK - 1 > q0 + off) || k0 < band_max;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kBK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][nt][e] * sl2;
          if (need_mask) {
            const int kc = nt * 8 + 2 * t4 + (e & 1);
            const int row = q0 + w0 + 16 * mt + g + (e >> 1) * 8;
            if (!ok_s[buf][kc] || (causal && k0 + kc > row + off) || k0 + kc < lo_r[mt][e >> 1]) x = -INFINITY;
          }
          s[mt][nt][e] = x;
        }

    // Online softmax per m-tile and row half h (row +8h); the 4 lanes of a quad share a row.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kBK / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][h], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: exp2(-inf - 0) = 0
        const float alpha = exp2f(m[mt][h] - m_use);
        m[mt][h] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kBK / 8; ++nt) {
          s[mt][nt][2 * h] = exp2f(s[mt][nt][2 * h] - m_use);
          s[mt][nt][2 * h + 1] = exp2f(s[mt][nt][2 * h + 1] - m_use);
          rs += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
        }
        l[mt][h] = l[mt][h] * alpha + rs;  // a per-thread partial; the quad sums it at the end
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[mt][dt][2 * h] *= alpha;
          o[mt][dt][2 * h + 1] *= alpha;
        }
      }

    // O += P V
#pragma unroll
    for (int kc = 0; kc < kBK / 16; ++kc) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a<T>(pa[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ldsm_x4_trans(vb, frag_a<LD>(Vb, kc * 16, dp * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][2 * dp], pa[mt], vb[0], vb[1]);
          mma16816<T>(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // all warps are done with buffer buf before it is refilled
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 2);
    }
    const float inv0 = l[mt][0] > 0.0f ? 1.0f / l[mt][0] : 0.0f, inv1 = l[mt][1] > 0.0f ? 1.0f / l[mt][1] : 0.0f;
    // Stage through this warp's own 16 rows of Qs (only this warp ever read them).
    const int r0 = w0 + 16 * mt;
    store_rows<T, D>(Qs + r0 * LD, o[mt], inv0, inv1, og, so.st, q0 + r0, Tq, lane);
    if (t4 == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q0 + r0 + g + 8 * h;
        if (row < Tq) lg[row] = l[mt][h] > 0.0f ? (m[mt][h] + log2f(l[mt][h])) * kLn2 : INFINITY;
      }
    }
  }
}

// ======================================================================== tensor-core backward

// sum of a[e] * b[e] over one 16-byte chunk of 8 16-bit values each (f32 accumulation, in order):
// a piece of delta_i = sum_d dO[i,d] * O[i,d].
template <class T> __device__ __forceinline__ float dot_chunk8(const T* a, const T* b) {
  const uint4 ua = *reinterpret_cast<const uint4*>(a), ub = *reinterpret_cast<const uint4*>(b);
  const T* pa = reinterpret_cast<const T*>(&ua);
  const T* pb = reinterpret_cast<const T*>(&ub);
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) s += to_f32(pa[e]) * to_f32(pb[e]);
  return s;
}

// delta_i = sum_d dO[i,d] * O[i,d], stored as f32 in the first 4 bytes of dq row i.
// D / 8 lanes per row, one 16-byte chunk each.
template <class T, int D>
__global__ void attn_delta_mma(T* __restrict__ dq, const T* __restrict__ out, const T* __restrict__ dout, Rows sdq,
                               Rows so, Rows sdo, int H, int Tq, int64_t rows) {
  constexpr int G = D / 8;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = i / G;  // (bh, t) = (row / Tq, row % Tq)
  const int ch = int(i % G);
  const int64_t bh = row / Tq, t = row - bh * Tq;
  float s = 0.0f;
  if (row < rows)
    s = dot_chunk8(out + so.head(bh, H) + t * so.st + ch * 8, dout + sdo.head(bh, H) + t * sdo.st + ch * 8);
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // groups of G aligned lanes
  if (row < rows && ch == 0) *reinterpret_cast<float*>(dq + sdq.head(bh, H) + t * sdq.st) = s;
}

// dK, dV for one 64-key tile of one kv head, looping over the G query heads of its group and,
// for each, over the query tiles that can see the keys (one pipelined sequence of G * ntq tiles).
// With S > 1 (a cluster of S blocks per key tile, sm_90) block c of the cluster takes query heads
// c G / S .. (c + 1) G / S - 1 only, and the cluster adds its S partial sums in rank order through
// distributed shared memory: few kv heads (TinyLlama: 4) otherwise make too few blocks, each
// walking all G heads. (Launch bounds: 3 blocks of 168 registers per SM; 189 registers and 2
// blocks were 14% slower on GPT-2's shapes.) Head dim 256: the dK and dV accumulators of all
// 256 columns would take 256 registers, so each block keeps DH = 128 of them (blockIdx.z the
// half) and computes S^T and dP^T over the whole head dim for each half: 9 tile products
// where 7 would do, no spills.
template <int D> constexpr int dkdv_cols() { return D <= 128 ? D : 128; }

template <class T, int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1)
    attn_bwd_dkdv_mma(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ q, const T* __restrict__ k,
                      const T* __restrict__ v, const T* __restrict__ dout, const float* __restrict__ lse,
                      const T* __restrict__ dq_delta, const uint8_t* __restrict__ mask, Rows sdk, Rows sdv, Rows sq,
                      Rows sk, Rows sv, Rows sdo, Rows sdq, int H, int G, int Tq, int Tk, bool causal, float scale,
                      float sl2, int S, const float* __restrict__ dlt_in, BandArgs ba) {
  constexpr int LD = row_stride<D>(), BQ = bwd_bq<D>(), DH = dkdv_cols<D>();
  const int col0 = int(blockIdx.z) * DH;  // this block's first dK / dV column
  extern __shared__ __align__(16) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);  // [kBK][LD]; later the dK staging area
  T* Vs = Ks + kBK * LD;               // [kBK][LD]; later the dV staging area
  T* Qs = Vs + kBK * LD;               // [2][BQ][LD]
  T* dOs = Qs + 2 * BQ * LD;           // [2][BQ][LD]
  __shared__ float lse_s[2][BQ];       // lse * log2(e), +inf for rows that contribute nothing
  __shared__ float dlt_s[2][BQ];
  __shared__ int lo_s[2][BQ];  // each query's first visible key (the band; 0 without)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t bkv = blockIdx.x / S;  // (batch, kv head); its query heads are bkv * G .. bkv * G + G - 1
  const int part = int(blockIdx.x - bkv * S), Gs = G / S;  // this block takes heads part * Gs .. + Gs - 1
  const int Hkv = H / G;
  const int b = int(bkv / Hkv);
  const int k0 = int(blockIdx.y) * kBK;  // causal: low key tiles have the most work; they go first
  const int off = Tk - Tq;
  const T* kg = k + sk.head(bkv, Hkv);
  const T* vg = v + sv.head(bkv, Hkv);
  T* dkg = dk + sdk.head(bkv, Hkv) + col0;
  T* dvg = dv + sdv.head(bkv, Hkv) + col0;
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;

  // Queries before qbeg cannot see any key of this tile (causal), nor queries from qend on (the band).
  const Band band = ba.of(b, Tq, off);
  const int qbeg = causal ? max(0, k0 - off) / BQ * BQ : 0;
  const int qend = band.query_end(min(k0 + kBK, Tk), qbeg, Tq);
  const int ntq = qbeg < qend ? (qend - qbeg + BQ - 1) / BQ : 0;
  if (ntq == 0) {  // the same for every block of a cluster: none of them reaches its syncs
    if (part == 0) {
      zero_rows(dkg, sdk.st, k0, kBK, Tk, DH);
      zero_rows(dvg, sdv.st, k0, kBK, Tk, DH);
    }
    return;
  }
  // Tile n of the sequence: query head bkv * G + part * Gs + n / ntq, query rows from qbeg + (n % ntq) * BQ.
  auto load_q = [&](int buf, int n) {
    const int gi = n / ntq, qi0 = qbeg + (n - gi * ntq) * BQ;
    const int64_t bh = bkv * G + part * Gs + gi;
    const T* dqg = dq_delta + sdq.head(bh, H);
    const float* lg = lse + bh * Tq;
    tile_load_async<T, D, BQ>(Qs + buf * BQ * LD, q + sq.head(bh, H), sq.st, qi0, Tq);
    tile_load_async<T, D, BQ>(dOs + buf * BQ * LD, dout + sdo.head(bh, H), sdo.st, qi0, Tq);
    for (int i = tid; i < BQ; i += kThreads) {
      const int row = qi0 + i;
      float l2 = INFINITY, dl = 0.0f;
      if (row < Tq) {
        const float L = lg[row];
        if (!isinf(L)) l2 = L * kLog2e;
        dl = dlt_in ? dlt_in[bh * Tq + row] : *reinterpret_cast<const float*>(dqg + int64_t(row) * sdq.st);
      }
      lse_s[buf][i] = l2;
      dlt_s[buf][i] = dl;
      lo_s[buf][i] = !band.on() ? 0 : row < Tq ? band.first(row) : INT_MAX;  // past Tq: P = 0 anyway
    }
  };
  tile_load_async<T, D, kBK>(Ks, kg, sk.st, k0, Tk);
  tile_load_async<T, D, kBK>(Vs, vg, sv.st, k0, Tk);
  load_q(0, 0);
  cp_async_commit();

  // This thread's key rows kr and kr + 8; a masked or out-of-range key gets P = 0 (so dK = dV = 0).
  const int kr = k0 + warp * 16 + g;
  const bool kok[2] = {kr < Tk && (!mrow || mrow[kr] != 0), kr + 8 < Tk && (!mrow || mrow[kr + 8] != 0)};
  float dkacc[DH / 8][4], dvacc[DH / 8][4];
#pragma unroll
  for (int i = 0; i < DH / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dkacc[i][e] = dvacc[i][e] = 0.0f;

  const int ntiles = Gs * ntq;
  for (int n = 0; n < ntiles; ++n) {
    const int buf = n & 1, qi0 = qbeg + (n % ntq) * BQ;
    if (n + 1 < ntiles) load_q(buf ^ 1, n + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* Qb = Qs + buf * BQ * LD;
    const T* dOb = dOs + buf * BQ * LD;

    // S^T = K Q^T (16 keys x BQ queries per warp)
    float st[BQ / 8][4];
#pragma unroll
    for (int i = 0; i < BQ / 8; ++i) st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4];
      ldsm_x4(ka, frag_a<LD>(Ks, warp * 16, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        uint32_t qb[4];
        ldsm_x4(qb, frag_bt<LD>(Qb, np * 16, kk * 16, lane));
        mma16816<T>(st[2 * np], ka, qb[0], qb[1]);
        mma16816<T>(st[2 * np + 1], ka, qb[2], qb[3]);
      }
    }
    // P^T = exp2(S^T * scale * log2e - lse * log2e), zero where masked.
    const bool causal_tile = causal && k0 + kBK - 1 > qi0 + off;
    const bool band_tile = band.on() && k0 < lo_s[buf][BQ - 1];  // the tile's largest bound
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = nt * 8 + 2 * t4 + (e & 1);
        const int key = kr + (e >> 1) * 8;
        float p = exp2f(st[nt][e] * sl2 - lse_s[buf][qc]);
        if (!kok[e >> 1] || (causal_tile && key > qi0 + qc + off) || (band_tile && key < lo_s[buf][qc])) p = 0.0f;
        st[nt][e] = p;
      }
    // dV += P^T dO
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      uint32_t pa[4];
      c_to_a<T>(pa, st[2 * kc], st[2 * kc + 1]);
#pragma unroll
      for (int dp = 0; dp < DH / 16; ++dp) {
        uint32_t b4[4];
        ldsm_x4_trans(b4, frag_a<LD>(dOb, kc * 16, col0 + dp * 16, lane));
        mma16816<T>(dvacc[2 * dp], pa, b4[0], b4[1]);
        mma16816<T>(dvacc[2 * dp + 1], pa, b4[2], b4[3]);
      }
    }
    // dP^T = V dO^T
    float dpt[BQ / 8][4];
#pragma unroll
    for (int i = 0; i < BQ / 8; ++i) dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t va[4];
      ldsm_x4(va, frag_a<LD>(Vs, warp * 16, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        uint32_t b4[4];
        ldsm_x4(b4, frag_bt<LD>(dOb, np * 16, kk * 16, lane));
        mma16816<T>(dpt[2 * np], va, b4[0], b4[1]);
        mma16816<T>(dpt[2 * np + 1], va, b4[2], b4[3]);
      }
    }
    // dS^T = P^T * (dP^T - delta)
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - dlt_s[buf][nt * 8 + 2 * t4 + (e & 1)]);
    // dK += dS^T Q (scaled at the end)
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      uint32_t da[4];
      c_to_a<T>(da, dpt[2 * kc], dpt[2 * kc + 1]);
#pragma unroll
      for (int dp = 0; dp < DH / 16; ++dp) {
        uint32_t b4[4];
        ldsm_x4_trans(b4, frag_a<LD>(Qb, kc * 16, col0 + dp * 16, lane));
        mma16816<T>(dkacc[2 * dp], da, b4[0], b4[1]);
        mma16816<T>(dkacc[2 * dp + 1], da, b4[2], b4[3]);
      }
    }
    __syncthreads();  // buffer buf is free for the next prefetch
  }
  if (S == 1) {
    // Each warp only ever read its own 16 rows of Ks and Vs: stage the results there.
    store_rows<T, D, DH>(Ks + warp * 16 * LD, dkacc, scale, scale, dkg, sdk.st, k0 + warp * 16, Tk, lane);
    store_rows<T, D, DH>(Vs + warp * 16 * LD, dvacc, 1.0f, 1.0f, dvg, sdv.st, k0 + warp * 16, Tk, lane);
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The partial sums, f32 [2][kBK][DH] (dK, then dV), over the tiles (the loop ended with a sync:
  // no warp reads them any more); then block c adds the S partials of rows c kBK / S .. in rank order.
  float* acc = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int dt = 0; dt < DH / 8; ++dt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + g + 8 * h, col = dt * 8 + 2 * t4;
      *reinterpret_cast<float2*>(acc + row * DH + col) = make_float2(dkacc[dt][2 * h], dkacc[dt][2 * h + 1]);
      *reinterpret_cast<float2*>(acc + (kBK + row) * DH + col) = make_float2(dvacc[dt][2 * h], dvacc[dt][2 * h + 1]);
    }
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();  // every block's partials are written
  const int rows = kBK / S, r0 = part * rows;
  for (int i = tid; i < 2 * rows * (DH / 4); i += kThreads) {
    const int which = i / (rows * (DH / 4)), rest = i - which * rows * (DH / 4);
    const int r = r0 + rest / (DH / 4), c4 = (rest % (DH / 4)) * 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 0; q < S; ++q) {
      const float4 x = *reinterpret_cast<const float4*>(cluster.map_shared_rank(acc, q) + (which * kBK + r) * DH + c4);
      sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
    }
    if (k0 + r < Tk) {
      const float m = which == 0 ? scale : 1.0f;
      T* dst = which == 0 ? dkg + int64_t(k0 + r) * sdk.st + c4 : dvg + int64_t(k0 + r) * sdv.st + c4;
      *reinterpret_cast<uint32_t*>(dst) = pack2<T>(sum.x * m, sum.y * m);
      *reinterpret_cast<uint32_t*>(dst + 2) = pack2<T>(sum.z * m, sum.w * m);
    }
  }
  cluster.sync();  // the others keep their shared memory until every block has read it
#endif
}

// dQ for one 64-query tile, looping over the key tiles it can see. (G comes last: placed after
// H it changed ptxas's register allocation of the D = 128 kernel, 238 -> 175.)
template <class T, int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 4 : 1)
    attn_bwd_dq_mma(T* __restrict__ dq, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const T* __restrict__ dout, const float* __restrict__ lse, const uint8_t* __restrict__ mask,
                    Rows sdq, Rows sq, Rows sk, Rows sv, Rows sdo, int H, int Tq, int Tk, bool causal,
                    float scale, float sl2, int G, const T* __restrict__ out, Rows so, float* __restrict__ dlt_out,
                    BandArgs ba) {
  constexpr int LD = row_stride<D>();
  extern __shared__ __align__(16) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);  // [kBQ][LD]; later the dQ staging area
  T* dOs = Qs + kBQ * LD;              // [kBQ][LD]
  T* Ks = dOs + kBQ * LD;              // [2][kBK][LD]
  T* Vs = Ks + 2 * kBK * LD;           // [2][kBK][LD]
  __shared__ uint8_t ok_s[2][kBK];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t bh = blockIdx.x;
  const int b = int(bh / H);
  const int q0 = int(gridDim.y - 1 - blockIdx.y) * kBQ;
  const int off = Tk - Tq;
  const T* qg = q + sq.head(bh, H);
  const T* kg = k + sk.kv_head(bh, H, G);
  const T* vg = v + sv.kv_head(bh, H, G);
  const T* dog = dout + sdo.head(bh, H);
  const float* lg = lse + bh * Tq;
  T* dqg = dq + sdq.head(bh, H);
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;

  const int r_lo = q0 + warp * 16 + g;
  float lse2[2], dlt[2];
  if (dlt_out) {
    // This kernel runs first and works out delta itself: lanes 2i and 2i + 1 take half of row
    // q0 + warp * 16 + i each. The dK/dV kernel reads the rows' deltas from dlt_out afterwards
    // (every row < Tq gets one, 0 for a row that sees no key: its O is zero).
    const int row = q0 + warp * 16 + (lane >> 1), c0 = (lane & 1) * (D / 2);
    float sum = 0.0f;
    if (row < Tq) {
      const T* orow = out + so.head(bh, H) + int64_t(row) * so.st + c0;
      const T* drow = dog + int64_t(row) * sdo.st + c0;
#pragma unroll
      for (int c = 0; c < D / 2; c += 8) sum += dot_chunk8(orow + c, drow + c);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if ((lane & 1) == 0 && row < Tq) dlt_out[bh * Tq + row] = sum;
    dlt[0] = __shfl_sync(0xffffffffu, sum, 2 * g);
    dlt[1] = __shfl_sync(0xffffffffu, sum, 2 * (g + 8));
  }
  const Band band = ba.of(b, Tq, off);
  const int kbeg = band.on() ? band.first(q0) / kBK * kBK : 0;
  const int kend = causal ? min(Tk, q0 + kBQ + off) : Tk;
  const int ntiles = kend > kbeg ? (kend - kbeg + kBK - 1) / kBK : 0;
  if (ntiles == 0) {
    zero_rows(dqg, sdq.st, q0, kBQ, Tq, D);
    return;
  }
  const int band_max = band.on() ? band.first(min(q0 + kBQ, Tq) - 1) : 0;
  const int lo_r[2] = {band.on() ? band.first(min(r_lo, Tq - 1)) : 0, band.on() ? band.first(min(r_lo + 8, Tq - 1)) : 0};
  // Row statistics (lse2 = +inf: the row contributes nothing); without dlt_out delta is read from
  // this warp's own dq rows before anything overwrites them.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r_lo + 8 * h;
    lse2[h] = INFINITY;
    if (!dlt_out) dlt[h] = 0.0f;
    if (row < Tq) {
      const float L = lg[row];
      if (!isinf(L)) lse2[h] = L * kLog2e;
      if (!dlt_out) dlt[h] = *reinterpret_cast<const float*>(dqg + int64_t(row) * sdq.st);
    }
  }
  auto load_kv = [&](int buf, int k0) {
    tile_load_async<T, D, kBK>(Ks + buf * kBK * LD, kg, sk.st, k0, Tk);
    tile_load_async<T, D, kBK>(Vs + buf * kBK * LD, vg, sv.st, k0, Tk);
    if (tid < kBK) {
      const int key = k0 + tid;
      ok_s[buf][tid] = key < Tk && (!mrow || mrow[key] != 0);
    }
  };
  tile_load_async<T, D, kBQ>(Qs, qg, sq.st, q0, Tq);
  tile_load_async<T, D, kBQ>(dOs, dog, sdo.st, q0, Tq);
  load_kv(0, kbeg);
  cp_async_commit();

  float dqacc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dqacc[i][0] = dqacc[i][1] = dqacc[i][2] = dqacc[i][3] = 0.0f;

  for (int j = 0; j < ntiles; ++j) {
    const int buf = j & 1, k0 = kbeg + j * kBK;
    if (j + 1 < ntiles) load_kv(buf ^ 1, k0 + kBK);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* Kb = Ks + buf * kBK * LD;
    const T* Vb = Vs + buf * kBK * LD;

    // S = Q K^T and dP = dO V^T (16 queries x 64 keys per warp)
    float s[kBK / 8][4], dp[kBK / 8][4];
#pragma unroll
    for (int i = 0; i < kBK / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[4], da[4];
      ldsm_x4(qa, frag_a<LD>(Qs, warp * 16, kk * 16, lane));
      ldsm_x4(da, frag_a<LD>(dOs, warp * 16, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < kBK / 16; ++np) {
        uint32_t kb[4], vb[4];
        ldsm_x4(kb, frag_bt<LD>(Kb, np * 16, kk * 16, lane));
        ldsm_x4(vb, frag_bt<LD>(Vb, np * 16, kk * 16, lane));
        mma16816<T>(s[2 * np], qa, kb[0], kb[1]);
        mma16816<T>(s[2 * np + 1], qa, kb[2], kb[3]);
        mma16816<T>(dp[2 * np], da, vb[0], vb[1]);
        mma16816<T>(dp[2 * np + 1], da, vb[2], vb[3]);
      }
    }
    // dS = P * (dP - delta), P = exp2(S * scale * log2e - lse * log2e), zero where masked.
    const bool need_mask = mrow || k0 + kBK > Tk || (causal && k0 + kBK - 1 > q0 + off) || k0 < band_max;
#pragma unroll
    for (int nt = 0; nt < kBK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        float p = exp2f(s[nt][e] * sl2 - lse2[h]);
        if (need_mask) {
          const int kc = nt * 8 + 2 * t4 + (e & 1);
          if (!ok_s[buf][kc] || (causal && k0 + kc > r_lo + 8 * h + off) || k0 + kc < lo_r[h]) p = 0.0f;
        }
        s[nt][e] = p * (dp[nt][e] - dlt[h]);
      }
    // dQ += dS K (scaled at the end)
#pragma unroll
    for (int kc = 0; kc < kBK / 16; ++kc) {
      uint32_t a[4];
      c_to_a<T>(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t kb[4];
        ldsm_x4_trans(kb, frag_a<LD>(Kb, kc * 16, dt * 16, lane));
        mma16816<T>(dqacc[2 * dt], a, kb[0], kb[1]);
        mma16816<T>(dqacc[2 * dt + 1], a, kb[2], kb[3]);
      }
    }
    __syncthreads();
  }
  // Each warp only ever read its own 16 rows of Qs: stage dQ there.
  store_rows<T, D>(Qs + warp * 16 * LD, dqacc, scale, scale, dqg, sdq.st, q0 + warp * 16, Tq, lane);
}

// ======================================================================== SIMT fallback (f32, any D <= 512)

// A warp owns kRpw rows of one (b, h) (queries, or keys for dK/dV) and walks the other side in
// chunks of 32, one partner per lane. Each chunk is staged transposed in the warp's shared
// memory ([D][33] f32, filled by coalesced row reads), so lane j reads its partner's d-th value
// without bank conflicts, and a lane running over d reads the chunk's values the same way.
// The warp's own rows sit in shared memory too (read as broadcasts). f32 throughout; only
// __syncwarp is needed since no data is shared between warps.
constexpr int kRpw = 4;          // rows per warp
constexpr int kSimtMaxD = 512;
constexpr int kTS = 33;          // stride of a transposed chunk: 32 partners + 1 (no bank conflicts)

// Rows [p0, p0 + 32) of a [np, D] matrix (row stride ld), transposed into t[d * kTS + j]; rows past np become zeros.
template <class T>
__device__ __forceinline__ void stage_t(float* t, const T* g, int64_t ld, int p0, int np, int D, int lane) {
  for (int j = 0; j < 32; ++j) {
    const bool ok = p0 + j < np;
    const T* row = g + int64_t(ok ? p0 + j : 0) * ld;
    for (int d = lane; d < D; d += 32) t[d * kTS + j] = ok ? to_f32(row[d]) : 0.0f;
  }
}
// The warp's rows [r0, r0 + kRpw) of a [n, D] matrix (row stride ld) into s[r * D + d] (times mul); rows past n are zeros.
template <class T>
__device__ __forceinline__ void stage_rows(float* s, const T* g, int64_t ld, int r0, int n, int D, int lane,
                                           float mul) {
  for (int r = 0; r < kRpw; ++r)
    for (int d = lane; d < D; d += 32) s[r * D + d] = r0 + r < n ? to_f32(g[int64_t(r0 + r) * ld + d]) * mul : 0.0f;
}

// delta (f32) kept in the first 4 bytes of a dq row, written as two 16-bit halves so that a row
// of 16-bit values (2-byte aligned) works too. Needs D * sizeof(T) >= 4.
__device__ __forceinline__ void put_delta(void* row, float v) {
  const uint32_t u = __float_as_uint(v);
  static_cast<uint16_t*>(row)[0] = uint16_t(u & 0xffffu);
  static_cast<uint16_t*>(row)[1] = uint16_t(u >> 16);
}
__device__ __forceinline__ float get_delta(const void* row) {
  const uint16_t* h = static_cast<const uint16_t*>(row);
  return __uint_as_float(uint32_t(h[0]) | (uint32_t(h[1]) << 16));
}

// Warp w of the grid: its (b, h) and first row.
struct WarpRows {
  int64_t bh;
  int r0;
};
__device__ __forceinline__ bool warp_rows(int64_t nwarps, int groups, WarpRows& w) {
  const int64_t id = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (id >= nwarps) return false;
  w.bh = id / groups;
  w.r0 = int(id - w.bh * groups) * kRpw;
  return true;
}

// Per-warp shared floats of each kernel.
__host__ __device__ inline int64_t simt_fwd_floats(int64_t D) { return D * kTS + 2 * kRpw * D + kRpw * 32; }
__host__ __device__ inline int64_t simt_dq_floats(int64_t D) { return 2 * D * kTS + 3 * kRpw * D + kRpw * 32; }
__host__ __device__ inline int64_t simt_dkdv_floats(int64_t D) { return 2 * D * kTS + 4 * kRpw * D + 2 * kRpw * 32; }

template <class T>
__global__ void attn_fwd_simt(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ q,
                              const T* __restrict__ k, const T* __restrict__ v, const uint8_t* __restrict__ mask,
                              Rows so, Rows sq, Rows sk, Rows sv, int64_t nwarps, int groups, int H, int G, int Tq,
                              int Tk, int D, bool causal, float scale, BandArgs ba) {
  extern __shared__ float fsm[];
  WarpRows w;
  if (!warp_rows(nwarps, groups, w)) return;  // no block barriers in this kernel
  const int lane = threadIdx.x & 31;
  float* kt = fsm + (threadIdx.x >> 5) * simt_fwd_floats(D);
  float* qs = kt + D * kTS;
  float* os = qs + kRpw * D;
  float* ps = os + kRpw * D;
  const int b = int(w.bh / H), off = Tk - Tq;
  const T* kg = k + sk.kv_head(w.bh, H, G);
  const T* vg = v + sv.kv_head(w.bh, H, G);
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;
  stage_rows(qs, q + sq.head(w.bh, H), sq.st, w.r0, Tq, D, lane, scale);
  for (int i = lane; i < kRpw * D; i += 32) os[i] = 0.0f;
  const int last = min(w.r0 + kRpw, Tq) - 1;  // the warp's last real row
  const int kend = causal ? min(Tk, last + off + 1) : Tk;
  const Band band = ba.of(b, Tq, off);
  int lo[kRpw];  // each row's first visible key (the band)
#pragma unroll
  for (int r = 0; r < kRpw; ++r) lo[r] = band.on() ? band.first(min(w.r0 + r, Tq - 1)) : 0;
  float m[kRpw], l[kRpw];
#pragma unroll
  for (int r = 0; r < kRpw; ++r) { m[r] = -INFINITY; l[r] = 0.0f; }
  for (int j0 = lo[0] / 32 * 32; j0 < kend; j0 += 32) {
    __syncwarp();  // the previous chunk is no longer read
    stage_t(kt, kg, sk.st, j0, Tk, D, lane);
    __syncwarp();
    const int j = j0 + lane;
    const bool key_ok = j < kend && (!mrow || mrow[j] != 0);
    float s[kRpw] = {};
    for (int d = 0; d < D; ++d) {
      const float kv = kt[d * kTS + lane];
#pragma unroll
      for (int r = 0; r < kRpw; ++r) s[r] += qs[r * D + d] * kv;
    }
    float alpha[kRpw];
#pragma unroll
    for (int r = 0; r < kRpw; ++r) {
      const int row = w.r0 + r;
      const bool ok = key_ok && row < Tq && (!causal || j <= row + off) && j >= lo[r];
      const float x = ok ? s[r] : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(x));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = expf(m[r] - m_use);
      const float p = expf(x - m_use);
      l[r] = l[r] * alpha[r] + warp_sum(p);
      m[r] = m_new;
      ps[r * 32 + lane] = p;
    }
    __syncwarp();
    const int nj = min(32, Tk - j0);
    for (int d = lane; d < D; d += 32) {
      float acc[kRpw];
#pragma unroll
      for (int r = 0; r < kRpw; ++r) acc[r] = os[r * D + d] * alpha[r];
      for (int jj = 0; jj < nj; ++jj) {
        const float vv = to_f32(vg[int64_t(j0 + jj) * sv.st + d]);
#pragma unroll
        for (int r = 0; r < kRpw; ++r) acc[r] += ps[r * 32 + jj] * vv;
      }
#pragma unroll
      for (int r = 0; r < kRpw; ++r) os[r * D + d] = acc[r];
    }
  }
  T* og = out + so.head(w.bh, H);
#pragma unroll
  for (int r = 0; r < kRpw; ++r) {
    const int row = w.r0 + r;
    if (row >= Tq) break;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int d = lane; d < D; d += 32) og[int64_t(row) * so.st + d] = from_f32<T>(os[r * D + d] * inv);
    if (lane == 0) lse[w.bh * Tq + row] = l[r] > 0.0f ? m[r] + logf(l[r]) : INFINITY;
  }
}

// delta_i = sum_d dO[i,d] * O[i,d] into dq row i (warp per row).
template <class T>
__global__ void attn_delta_simt(T* __restrict__ dq, const T* __restrict__ out, const T* __restrict__ dout, Rows sdq,
                                Rows so, Rows sdo, int H, int Tq, int64_t rows, int D) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t bh = row / Tq, t = row - bh * Tq;
  const T* o = out + so.head(bh, H) + t * so.st;
  const T* g = dout + sdo.head(bh, H) + t * sdo.st;
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += to_f32(g[d]) * to_f32(o[d]);
  s = warp_sum(s);
  if (lane == 0) put_delta(dq + sdq.head(bh, H) + t * sdq.st, s);
}

// dQ: a warp owns kRpw query rows; lanes take keys.
template <class T>
__global__ void attn_bwd_dq_simt(T* __restrict__ dq, const T* __restrict__ q, const T* __restrict__ k,
                                 const T* __restrict__ v, const T* __restrict__ dout, const float* __restrict__ lse,
                                 const uint8_t* __restrict__ mask, Rows sdq, Rows sq, Rows sk, Rows sv, Rows sdo,
                                 int64_t nwarps, int groups, int H, int G, int Tq, int Tk, int D, bool causal,
                                 float scale, BandArgs ba) {
  extern __shared__ float fsm[];
  WarpRows w;
  if (!warp_rows(nwarps, groups, w)) return;
  const int lane = threadIdx.x & 31;
  float* kt = fsm + (threadIdx.x >> 5) * simt_dq_floats(D);
  float* vt = kt + D * kTS;
  float* qs = vt + D * kTS;
  float* dos = qs + kRpw * D;
  float* dqs = dos + kRpw * D;
  float* ps = dqs + kRpw * D;
  const int b = int(w.bh / H), off = Tk - Tq;
  const T* kg = k + sk.kv_head(w.bh, H, G);
  const T* vg = v + sv.kv_head(w.bh, H, G);
  T* dqg = dq + sdq.head(w.bh, H);
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;
  // Row statistics first: delta lives in the dq rows this warp overwrites at the end.
  float L[kRpw], delta[kRpw];
#pragma unroll
  for (int r = 0; r < kRpw; ++r) {
    const int row = w.r0 + r;
    L[r] = row < Tq ? lse[w.bh * Tq + row] : INFINITY;
    delta[r] = row < Tq ? get_delta(dqg + int64_t(row) * sdq.st) : 0.0f;
  }
  stage_rows(qs, q + sq.head(w.bh, H), sq.st, w.r0, Tq, D, lane, 1.0f);
  stage_rows(dos, dout + sdo.head(w.bh, H), sdo.st, w.r0, Tq, D, lane, 1.0f);
  for (int i = lane; i < kRpw * D; i += 32) dqs[i] = 0.0f;
  const int last = min(w.r0 + kRpw, Tq) - 1;
  const int kend = causal ? min(Tk, last + off + 1) : Tk;
  const Band band = ba.of(b, Tq, off);
  int lo[kRpw];
#pragma unroll
  for (int r = 0; r < kRpw; ++r) lo[r] = band.on() ? band.first(min(w.r0 + r, Tq - 1)) : 0;
  for (int j0 = lo[0] / 32 * 32; j0 < kend; j0 += 32) {
    __syncwarp();
    stage_t(kt, kg, sk.st, j0, Tk, D, lane);
    stage_t(vt, vg, sv.st, j0, Tk, D, lane);
    __syncwarp();
    const int j = j0 + lane;
    const bool key_ok = j < kend && (!mrow || mrow[j] != 0);
    float s[kRpw] = {}, dp[kRpw] = {};
    for (int d = 0; d < D; ++d) {
      const float kv = kt[d * kTS + lane], vv = vt[d * kTS + lane];
#pragma unroll
      for (int r = 0; r < kRpw; ++r) {
        s[r] += qs[r * D + d] * kv;
        dp[r] += dos[r * D + d] * vv;
      }
    }
#pragma unroll
    for (int r = 0; r < kRpw; ++r) {
      const int row = w.r0 + r;
      const bool ok = key_ok && row < Tq && !isinf(L[r]) && (!causal || j <= row + off) && j >= lo[r];
      ps[r * 32 + lane] = ok ? expf(s[r] * scale - L[r]) * (dp[r] - delta[r]) : 0.0f;
    }
    __syncwarp();
    const int nj = min(32, Tk - j0);
    for (int d = lane; d < D; d += 32) {
      float acc[kRpw];
#pragma unroll
      for (int r = 0; r < kRpw; ++r) acc[r] = dqs[r * D + d];
      for (int jj = 0; jj < nj; ++jj) {
        const float kv = kt[d * kTS + jj];
#pragma unroll
        for (int r = 0; r < kRpw; ++r) acc[r] += ps[r * 32 + jj] * kv;
      }
#pragma unroll
      for (int r = 0; r < kRpw; ++r) dqs[r * D + d] = acc[r];
    }
  }
  __syncwarp();  // every lane has read its deltas (above) before any lane overwrites the rows
#pragma unroll
  for (int r = 0; r < kRpw; ++r) {
    const int row = w.r0 + r;
    if (row >= Tq) break;
    for (int d = lane; d < D; d += 32) dqg[int64_t(row) * sdq.st + d] = from_f32<T>(dqs[r * D + d] * scale);
  }
}

// dK, dV: a warp owns kRpw key rows of one (b, kv head) and walks the G query heads of its
// group in order; lanes take queries.
template <class T>
__global__ void attn_bwd_dkdv_simt(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ q,
                                   const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
                                   const float* __restrict__ lse, const T* __restrict__ dq_delta,
                                   const uint8_t* __restrict__ mask, Rows sdk, Rows sdv, Rows sq, Rows sk, Rows sv,
                                   Rows sdo, Rows sdq, int64_t nwarps, int groups, int H, int G, int Tq, int Tk,
                                   int D, bool causal, float scale, BandArgs ba) {
  extern __shared__ float fsm[];
  WarpRows w;
  if (!warp_rows(nwarps, groups, w)) return;
  const int lane = threadIdx.x & 31;
  float* qt = fsm + (threadIdx.x >> 5) * simt_dkdv_floats(D);
  float* dot = qt + D * kTS;
  float* ks = dot + D * kTS;
  float* vs = ks + kRpw * D;
  float* dks = vs + kRpw * D;
  float* dvs = dks + kRpw * D;
  float* ps = dvs + kRpw * D;
  float* dss = ps + kRpw * 32;
  const int Hkv = H / G;  // w.bh is (b, kv head); its query heads are w.bh * G .. w.bh * G + G - 1
  const int b = int(w.bh / Hkv), off = Tk - Tq;
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;
  stage_rows(ks, k + sk.head(w.bh, Hkv), sk.st, w.r0, Tk, D, lane, 1.0f);
  stage_rows(vs, v + sv.head(w.bh, Hkv), sv.st, w.r0, Tk, D, lane, 1.0f);
  for (int i = lane; i < kRpw * D; i += 32) dks[i] = dvs[i] = 0.0f;
  bool kok[kRpw];
#pragma unroll
  for (int r = 0; r < kRpw; ++r) kok[r] = w.r0 + r < Tk && (!mrow || mrow[w.r0 + r] != 0);
  const int ibeg = causal ? max(0, w.r0 - off) / 32 * 32 : 0;  // queries before it see none of these keys
  const Band band = ba.of(b, Tq, off);
  const int iend = band.query_end(min(w.r0 + kRpw, Tk), ibeg, Tq);  // nor queries from iend on
  for (int gi = 0; gi < G; ++gi) {
    const int64_t bh = w.bh * G + gi;
    const T* qg = q + sq.head(bh, H);
    const T* dog = dout + sdo.head(bh, H);
    const T* dlg = dq_delta + sdq.head(bh, H);
    const float* lg = lse + bh * Tq;
    for (int i0 = ibeg; i0 < iend; i0 += 32) {
      __syncwarp();
      stage_t(qt, qg, sq.st, i0, Tq, D, lane);
      stage_t(dot, dog, sdo.st, i0, Tq, D, lane);
      __syncwarp();
      const int i = i0 + lane;
      float L = INFINITY, dl = 0.0f;
      int lo_i = 0;
      if (i < Tq) {
        L = lg[i];
        dl = get_delta(dlg + int64_t(i) * sdq.st);
        if (band.on()) lo_i = band.first(i);
      }
      float s[kRpw] = {}, dp[kRpw] = {};
      for (int d = 0; d < D; ++d) {
        const float qv = qt[d * kTS + lane], gv = dot[d * kTS + lane];
#pragma unroll
        for (int r = 0; r < kRpw; ++r) {
          s[r] += ks[r * D + d] * qv;
          dp[r] += vs[r * D + d] * gv;
        }
      }
#pragma unroll
      for (int r = 0; r < kRpw; ++r) {
        const bool ok = kok[r] && i < Tq && !isinf(L) && (!causal || w.r0 + r <= i + off) && w.r0 + r >= lo_i;
        const float p = ok ? expf(s[r] * scale - L) : 0.0f;
        ps[r * 32 + lane] = p;
        dss[r * 32 + lane] = p * (dp[r] - dl);
      }
      __syncwarp();
      const int ni = min(32, Tq - i0);
      for (int d = lane; d < D; d += 32) {
        float av[kRpw], ak[kRpw];
#pragma unroll
        for (int r = 0; r < kRpw; ++r) { av[r] = dvs[r * D + d]; ak[r] = dks[r * D + d]; }
        for (int ii = 0; ii < ni; ++ii) {
          const float gv = dot[d * kTS + ii], qv = qt[d * kTS + ii];
#pragma unroll
          for (int r = 0; r < kRpw; ++r) {
            av[r] += ps[r * 32 + ii] * gv;
            ak[r] += dss[r * 32 + ii] * qv;
          }
        }
#pragma unroll
        for (int r = 0; r < kRpw; ++r) { dvs[r * D + d] = av[r]; dks[r * D + d] = ak[r]; }
      }
    }
  }
  T* dkg = dk + sdk.head(w.bh, Hkv);
  T* dvg = dv + sdv.head(w.bh, Hkv);
#pragma unroll
  for (int r = 0; r < kRpw; ++r) {
    const int row = w.r0 + r;
    if (row >= Tk) break;
    for (int d = lane; d < D; d += 32) {
      dkg[int64_t(row) * sdk.st + d] = from_f32<T>(dks[r * D + d] * scale);
      dvg[int64_t(row) * sdv.st + d] = from_f32<T>(dvs[r * D + d]);
    }
  }
}

// ======================================================================== register-tiled f32 (SIMT)

// The f32 path for head dims 32/64/128 (see use_fast_f32_attention): a block of 256 threads
// owns a 64-row tile (queries for the forward and dQ, keys for dK/dV) of one (b, h) and walks
// the other side in 64-row tiles staged in shared memory, row-major with a row stride of D + 4
// floats. Thread (ty, tx) = (tid / 16, tid % 16) computes the 4 x 4 scores of rows ty + 16 i and
// columns tx + 16 j with f32 FMA, reading float4 runs of D (the 8 lanes of a quarter warp hit 8
// distinct bank groups, the A operand is a broadcast); then the 64 x 64 P (or dS) goes through
// shared memory and the same thread accumulates rows ty + 16 i, columns fcol(tx, c) of the
// 64 x D product in registers. Same semantics, masking, saved lse and three backward steps
// (delta in the dq rows) as the other kernels; true f32 arithmetic throughout.
constexpr int kFT = 256;  // threads
constexpr int kFB = 64;   // rows per tile (both sides)
constexpr int kFP = kFB + 4;  // row stride of the 64 x 64 P / dS tile
template <int D> constexpr int f_ld() { return D + 4; }
template <int D> constexpr int f_cpt() { return D / 16; }  // output columns per thread

// Column of a thread's c-th output value: float4 runs tx*4 + 64 g for D >= 64, float2 runs for D = 32.
template <int D> __device__ __forceinline__ int fcol(int tx, int c) {
  if constexpr (D >= 64) return (c >> 2) * 64 + tx * 4 + (c & 3);
  else return tx * 2 + c;
}

// Loads the CPT output columns of one shared row.
template <int D> __device__ __forceinline__ void f_row(float (&x)[f_cpt<D>()], const float* row, int tx) {
  if constexpr (D >= 64) {
#pragma unroll
    for (int g = 0; g < D / 64; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(row + g * 64 + tx * 4);
      x[4 * g] = v.x, x[4 * g + 1] = v.y, x[4 * g + 2] = v.z, x[4 * g + 3] = v.w;
    }
  } else {
    const float2 v = *reinterpret_cast<const float2*>(row + tx * 2);
    x[0] = v.x, x[1] = v.y;
  }
}

// Rows [r0, r0 + 64) of a [n, D] f32 matrix (row stride ld, rows 16-byte aligned) into a shared
// tile with row stride D + 4; rows past n become zeros.
template <int D> __device__ __forceinline__ void f_load(float* s, const float* g, int64_t ld, int r0, int n) {
  constexpr int CH = D / 4, LD = f_ld<D>();
  for (int i = threadIdx.x; i < kFB * CH; i += kFT) {
    const int r = i / CH, ch = i - r * CH;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < n) v = *reinterpret_cast<const float4*>(g + int64_t(r0 + r) * ld + ch * 4);
    *reinterpret_cast<float4*>(s + r * LD + ch * 4) = v;
  }
}

// c[i][j] = sum_d A[ty + 16 i][d] * B[tx + 16 j][d] (both shared, row stride D + 4), d in order.
template <int D>
__device__ __forceinline__ void f_abt(float (&c)[4][4], const float* A, const float* B, int ty, int tx) {
  constexpr int LD = f_ld<D>();
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) c[i][j] = 0.0f;
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * LD + d);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 16 * j) * LD + d);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        c[i][j] = fmaf(a[i].x, b[j].x, c[i][j]);
        c[i][j] = fmaf(a[i].y, b[j].y, c[i][j]);
        c[i][j] = fmaf(a[i].z, b[j].z, c[i][j]);
        c[i][j] = fmaf(a[i].w, b[j].w, c[i][j]);
      }
  }
}

// o[i][c] += sum_{k < kn} P[ty + 16 i][k] * V[k][fcol(tx, c)]  (P row stride kFP, V row stride D + 4;
// kn is a multiple of 4, rows of V in [valid, kn) are zeros and so are their P entries).
template <int D>
__device__ __forceinline__ void f_ab(float (&o)[4][f_cpt<D>()], const float* P, const float* V, int kn, int ty,
                                     int tx) {
  constexpr int LD = f_ld<D>(), CPT = f_cpt<D>();
#pragma unroll 1
  for (int k = 0; k < kn; k += 4) {
    float4 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = *reinterpret_cast<const float4*>(P + (ty + 16 * i) * kFP + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float v[CPT];
      f_row<D>(v, V + (k + kk) * LD, tx);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pv = kk == 0 ? p[i].x : kk == 1 ? p[i].y : kk == 2 ? p[i].z : p[i].w;
#pragma unroll
        for (int c = 0; c < CPT; ++c) o[i][c] = fmaf(pv, v[c], o[i][c]);
      }
    }
  }
}

// Writes rows r0 + ty + 16 i (< n) of a 64 x D register tile (times mul) to global (row stride ld).
template <int D>
__device__ __forceinline__ void f_store(float* g, int64_t ld, int r0, int n, const float (&o)[4][f_cpt<D>()],
                                        const float (&mul)[4], int ty, int tx) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty + 16 * i;
    if (r >= n) continue;
    float* row = g + int64_t(r) * ld;
    if constexpr (D >= 64) {
#pragma unroll
      for (int gq = 0; gq < D / 64; ++gq)
        *reinterpret_cast<float4*>(row + gq * 64 + tx * 4) =
            make_float4(o[i][4 * gq] * mul[i], o[i][4 * gq + 1] * mul[i], o[i][4 * gq + 2] * mul[i],
                        o[i][4 * gq + 3] * mul[i]);
    } else {
      *reinterpret_cast<float2*>(row + tx * 2) = make_float2(o[i][0] * mul[i], o[i][1] * mul[i]);
    }
  }
}

// Rounds the count of valid rows of a tile up to a multiple of 4 (the f_ab step).
__device__ __forceinline__ int f_kn(int valid) { return min(kFB, (valid + 3) & ~3); }

template <int D> constexpr size_t f_fwd_smem() { return size_t(3 * kFB * f_ld<D>() + kFB * kFP) * sizeof(float); }
template <int D> constexpr size_t f_dq_smem() { return size_t(4 * kFB * f_ld<D>() + kFB * kFP) * sizeof(float); }
template <int D> constexpr size_t f_dkdv_smem() {
  return size_t(4 * kFB * f_ld<D>() + 2 * kFB * kFP) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kFT) attn_fwd_f32(float* __restrict__ out, float* __restrict__ lse,
                                                    const float* __restrict__ q, const float* __restrict__ k,
                                                    const float* __restrict__ v, const uint8_t* __restrict__ mask,
                                                    Rows so, Rows sq, Rows sk, Rows sv, int H, int G, int Tq,
                                                    int Tk, bool causal, float scale, BandArgs ba) {
  constexpr int LD = f_ld<D>(), CPT = f_cpt<D>();
  extern __shared__ __align__(16) float fsm[];
  float* Qs = fsm;              // [64][LD]
  float* Ks = Qs + kFB * LD;    // [64][LD]
  float* Vs = Ks + kFB * LD;    // [64][LD]
  float* Ps = Vs + kFB * LD;    // [64][kFP]
  __shared__ uint8_t ok_s[kFB];

  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t bh = blockIdx.x;
  const int b = int(bh / H);
  const int q0 = int(gridDim.y - 1 - blockIdx.y) * kFB;  // heaviest (causal) tiles first
  const int off = Tk - Tq;
  const float* kg = k + sk.kv_head(bh, H, G);
  const float* vg = v + sv.kv_head(bh, H, G);
  float* og = out + so.head(bh, H);
  float* lg = lse + bh * Tq;
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;

  const int kend = causal ? min(Tk, q0 + kFB + off) : Tk;  // keys [kbeg, kend) can be visible to the block
  const Band band = ba.of(b, Tq, off);
  const int kbeg = band.on() ? band.first(q0) / kFB * kFB : 0;
  int lo[4];  // this thread's rows' first visible keys
#pragma unroll
  for (int i = 0; i < 4; ++i) lo[i] = band.on() ? band.first(min(q0 + ty + 16 * i, Tq - 1)) : 0;
  if (kend <= kbeg) {
    zero_rows(og, so.st, q0, kFB, Tq, D);
    if (tid < kFB && q0 + tid < Tq) lg[q0 + tid] = INFINITY;
    return;
  }
  f_load<D>(Qs, q + sq.head(bh, H), sq.st, q0, Tq);

  float o[4][CPT], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < CPT; ++c) o[i][c] = 0.0f;
  }
  for (int k0 = kbeg; k0 < kend; k0 += kFB) {
    __syncthreads();  // the previous tile's K, V, P are no longer read
    f_load<D>(Ks, kg, sk.st, k0, Tk);
    f_load<D>(Vs, vg, sv.st, k0, Tk);
    if (tid < kFB) ok_s[tid] = k0 + tid < kend && (!mrow || mrow[k0 + tid] != 0);
    __syncthreads();
    float s[4][4];
    f_abt<D>(s, Qs, Ks, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = q0 + ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kc = tx + 16 * j;
        const bool ok = ok_s[kc] && (!causal || k0 + kc <= row + off) && k0 + kc >= lo[i];
        s[i][j] = ok ? s[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
#pragma unroll
      for (int w = 1; w < 16; w <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
      const float m_new = fmaxf(m[i], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[i] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = expf(s[i][j] - m_use);
        sum += p;
        Ps[(ty + 16 * i) * kFP + tx + 16 * j] = p;
      }
#pragma unroll
      for (int w = 1; w < 16; w <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < CPT; ++c) o[i][c] *= alpha;
    }
    __syncthreads();
    f_ab<D>(o, Ps, Vs, f_kn(min(kFB, Tk - k0)), ty, tx);
  }
  float inv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const int row = q0 + ty + 16 * i;
    if (tx == 0 && row < Tq) lg[row] = l[i] > 0.0f ? m[i] + logf(l[i]) : INFINITY;
  }
  f_store<D>(og, so.st, q0, Tq, o, inv, ty, tx);
}

// dQ: a block owns 64 query rows and walks the key tiles.
template <int D>
__global__ void __launch_bounds__(kFT) attn_bwd_dq_f32(float* __restrict__ dq, const float* __restrict__ q,
                                                       const float* __restrict__ k, const float* __restrict__ v,
                                                       const float* __restrict__ dout, const float* __restrict__ lse,
                                                       const uint8_t* __restrict__ mask, Rows sdq, Rows sq, Rows sk,
                                                       Rows sv, Rows sdo, int H, int G, int Tq, int Tk,
                                                       bool causal, float scale, BandArgs ba) {
  constexpr int LD = f_ld<D>(), CPT = f_cpt<D>();
  extern __shared__ __align__(16) float fsm[];
  float* Qs = fsm;
  float* dOs = Qs + kFB * LD;
  float* Ks = dOs + kFB * LD;
  float* Vs = Ks + kFB * LD;
  float* dSs = Vs + kFB * LD;  // [64][kFP]
  __shared__ uint8_t ok_s[kFB];
  __shared__ float L_s[kFB], dl_s[kFB];

  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t bh = blockIdx.x;
  const int b = int(bh / H);
  const int q0 = int(gridDim.y - 1 - blockIdx.y) * kFB;
  const int off = Tk - Tq;
  const float* kg = k + sk.kv_head(bh, H, G);
  const float* vg = v + sv.kv_head(bh, H, G);
  float* dqg = dq + sdq.head(bh, H);
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;
  // Row statistics first: the deltas live in the dq rows this block overwrites at the end.
  if (tid < kFB) {
    const int row = q0 + tid;
    L_s[tid] = row < Tq ? lse[bh * Tq + row] : INFINITY;
    dl_s[tid] = row < Tq ? get_delta(dqg + int64_t(row) * sdq.st) : 0.0f;
  }
  f_load<D>(Qs, q + sq.head(bh, H), sq.st, q0, Tq);
  f_load<D>(dOs, dout + sdo.head(bh, H), sdo.st, q0, Tq);
  __syncthreads();  // deltas read by their threads before anyone writes dq (at the end)
  float L[4], dl[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    L[i] = L_s[ty + 16 * i];
    dl[i] = dl_s[ty + 16 * i];
  }
  float acc[4][CPT];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < CPT; ++c) acc[i][c] = 0.0f;
  const int kend = causal ? min(Tk, q0 + kFB + off) : Tk;
  const Band band = ba.of(b, Tq, off);
  int lo[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) lo[i] = band.on() ? band.first(min(q0 + ty + 16 * i, Tq - 1)) : 0;
  for (int k0 = band.on() ? band.first(q0) / kFB * kFB : 0; k0 < kend; k0 += kFB) {
    __syncthreads();
    f_load<D>(Ks, kg, sk.st, k0, Tk);
    f_load<D>(Vs, vg, sv.st, k0, Tk);
    if (tid < kFB) ok_s[tid] = k0 + tid < kend && (!mrow || mrow[k0 + tid] != 0);
    __syncthreads();
    float s[4][4], dp[4][4];
    f_abt<D>(s, Qs, Ks, ty, tx);
    f_abt<D>(dp, dOs, Vs, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = q0 + ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kc = tx + 16 * j;
        const bool ok = ok_s[kc] && !isinf(L[i]) && (!causal || k0 + kc <= row + off) && k0 + kc >= lo[i];
        dSs[(ty + 16 * i) * kFP + kc] = ok ? expf(s[i][j] * scale - L[i]) * (dp[i][j] - dl[i]) : 0.0f;
      }
    }
    __syncthreads();
    f_ab<D>(acc, dSs, Ks, f_kn(min(kFB, Tk - k0)), ty, tx);
  }
  const float mul[4] = {scale, scale, scale, scale};
  f_store<D>(dqg, sdq.st, q0, Tq, acc, mul, ty, tx);
}

// dK, dV: a block owns 64 key rows of one (b, kv head) and walks the G query heads of its
// group in order, each over the query tiles that can see the keys.
template <int D>
__global__ void __launch_bounds__(kFT) attn_bwd_dkdv_f32(float* __restrict__ dk, float* __restrict__ dv,
                                                         const float* __restrict__ q, const float* __restrict__ k,
                                                         const float* __restrict__ v, const float* __restrict__ dout,
                                                         const float* __restrict__ lse,
                                                         const float* __restrict__ dq_delta,
                                                         const uint8_t* __restrict__ mask, Rows sdk, Rows sdv,
                                                         Rows sq, Rows sk, Rows sv, Rows sdo, Rows sdq, int H, int G,
                                                         int Tq, int Tk, bool causal, float scale, BandArgs ba) {
  constexpr int LD = f_ld<D>(), CPT = f_cpt<D>();
  extern __shared__ __align__(16) float fsm[];
  float* Ks = fsm;
  float* Vs = Ks + kFB * LD;
  float* Qs = Vs + kFB * LD;
  float* dOs = Qs + kFB * LD;
  float* PT = dOs + kFB * LD;   // [64 keys][kFP]
  float* dST = PT + kFB * kFP;  // [64 keys][kFP]
  __shared__ float L_s[kFB], dl_s[kFB];
  __shared__ int lo_s[kFB];  // each query's first visible key (the band)

  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t bkv = blockIdx.x;  // (batch, kv head); its query heads are bkv * G .. bkv * G + G - 1
  const int Hkv = H / G;
  const int b = int(bkv / Hkv);
  const int k0 = int(blockIdx.y) * kFB;
  const int off = Tk - Tq;
  const uint8_t* mrow = mask ? mask + int64_t(b) * Tk : nullptr;
  f_load<D>(Ks, k + sk.head(bkv, Hkv), sk.st, k0, Tk);
  f_load<D>(Vs, v + sv.head(bkv, Hkv), sv.st, k0, Tk);
  bool kok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = k0 + ty + 16 * i;
    kok[i] = key < Tk && (!mrow || mrow[key] != 0);
  }
  float ak[4][CPT], av[4][CPT];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < CPT; ++c) ak[i][c] = av[i][c] = 0.0f;
  // Queries before k0 - off see none of these keys (causal); whole query tiles are skipped.
  const int ibeg = causal ? max(0, k0 - off) / kFB * kFB : 0;
  const Band band = ba.of(b, Tq, off);
  const int iend = band.query_end(min(k0 + kFB, Tk), ibeg, Tq);  // queries from iend on see none either
  for (int gi = 0; gi < G; ++gi) {
    const int64_t bh = bkv * G + gi;
    const float* qg = q + sq.head(bh, H);
    const float* dog = dout + sdo.head(bh, H);
    const float* dlg = dq_delta + sdq.head(bh, H);
    const float* lg = lse + bh * Tq;
    for (int i0 = ibeg; i0 < iend; i0 += kFB) {
      __syncthreads();  // the previous tile's Q, dO, P, dS are no longer read
      f_load<D>(Qs, qg, sq.st, i0, Tq);
      f_load<D>(dOs, dog, sdo.st, i0, Tq);
      if (tid < kFB) {
        const int qi = i0 + tid;
        L_s[tid] = qi < Tq ? lg[qi] : INFINITY;
        dl_s[tid] = qi < Tq ? get_delta(dlg + int64_t(qi) * sdq.st) : 0.0f;
        lo_s[tid] = band.on() && qi < Tq ? band.first(qi) : 0;
      }
      __syncthreads();
      float s[4][4], dp[4][4];
      f_abt<D>(s, Ks, Qs, ty, tx);   // S^T: rows = keys, columns = queries
      f_abt<D>(dp, Vs, dOs, ty, tx); // dP^T
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int qc = tx + 16 * j, qi = i0 + qc;
        const float Lq = L_s[qc], dlq = dl_s[qc];
        const int loq = lo_s[qc];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = k0 + ty + 16 * i;
          const bool ok = kok[i] && qi < Tq && !isinf(Lq) && (!causal || key <= qi + off) && key >= loq;
          const float p = ok ? expf(s[i][j] * scale - Lq) : 0.0f;
          PT[(ty + 16 * i) * kFP + qc] = p;
          dST[(ty + 16 * i) * kFP + qc] = p * (dp[i][j] - dlq);
        }
      }
      __syncthreads();
      const int kn = f_kn(min(kFB, Tq - i0));
      f_ab<D>(av, PT, dOs, kn, ty, tx);
      f_ab<D>(ak, dST, Qs, kn, ty, tx);
    }
  }
  const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f}, mul[4] = {scale, scale, scale, scale};
  f_store<D>(dk + sdk.head(bkv, Hkv), sdk.st, k0, Tk, ak, mul, ty, tx);
  f_store<D>(dv + sdv.head(bkv, Hkv), sdv.st, k0, Tk, av, one, ty, tx);
}

// ======================================================================== launchers

struct AttnDims {
  int64_t B, H, Hkv, Tq, Tk, D;
  BandArgs band{nullptr, 0};  // the window and doc_pos, every kernel's last argument
  int G() const { return int(H / Hkv); }  // query heads per kv head
};

// window and doc_pos as the op's contract has them (the front-end checks the values).
BandArgs check_band(const char* op, const AttnDims& a, bool causal, int64_t window, const Tensor& doc, Device dev) {
  LT_CHECK(window >= 0 && window < (int64_t(1) << 31) && (window == 0 || causal),
           std::string(op) + ": window " + std::to_string(window), "a sliding window is causal, in [0, 2^31)", "");
  if (!doc.defined()) return {nullptr, int(window)};
  LT_CHECK(causal && a.Tq == a.Tk && doc.dtype() == DType::I32 && doc.is_contiguous() && doc.numel() == a.B * a.Tq &&
               doc.device() == dev,
           std::string(op) + ": doc_pos must be a contiguous i32 [B, T] on the device, for causal self-attention",
           "each token's position inside its document", "");
  return {doc.data<int32_t>(), int(window)};
}

// Rows of an operand (shape checked by the caller); unit stride on D is required.
Rows rows_of(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2]}; }

bool unit_d(const Tensor& t) { return t.dim() == 4 && (t.strides()[3] == 1 || t.size(3) == 1); }

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                         const Tensor& mask) {
  LT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, std::string(op) + ": q, k, v must be [B, H, T, D]",
           "the attention kernel takes 4-D operands", "reshape to [batch, heads, tokens, head_dim]");
  AttnDims a{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  LT_CHECK(k.shape() == Shape({a.B, a.Hkv, a.Tk, a.D}) && v.shape() == k.shape() && a.Hkv > 0 && a.H % a.Hkv == 0,
           std::string(op) + ": k and v must be [" + std::to_string(a.B) + ", Hkv, Tk, " + std::to_string(a.D) +
               "] with Hkv dividing " + std::to_string(a.H) + " (k " + shape_str(k.shape()) + ", v " +
               shape_str(v.shape()) + ")",
           "keys and values must match the queries' batch and head dim, each kv head serving H / Hkv query heads",
           "");
  for (const Tensor* t : {&q, &k, &v})
    LT_CHECK(unit_d(*t) && t->dtype() == q.dtype(),
             std::string(op) + ": q, k, v must be of one dtype with unit stride on the head dim (strides " +
                 shape_str(t->strides()) + ")",
             "the kernel reads each row of D values as one span (batch, head and time strides are free)",
             "make the head dim contiguous");
  LT_CHECK(lse.defined() && lse.dtype() == DType::F32 && lse.numel() == a.B * a.H * a.Tq && lse.is_contiguous(),
           std::string(op) + ": lse must be a contiguous f32 [B, H, Tq] tensor", "the log-sum-exp of each query row", "");
  if (mask.defined())
    LT_CHECK(mask.dtype() == DType::U8 && mask.numel() == a.B * a.Tk && mask.is_contiguous(),
             std::string(op) + ": mask must be a contiguous u8 [B, Tk] tensor", "1 = attend, 0 = padding", "");
  LT_CHECK(a.D > 0 && a.Tq < (int64_t(1) << 31) - kBQ && a.Tk < (int64_t(1) << 31) - kBK && a.B * a.H < (int64_t(1) << 31) &&
               a.H > 0,
           std::string(op) + ": unsupported sizes", "head dim must be positive, T and B*H below 2^31", "");
  return a;
}

void check_like(const char* op, const Tensor& t, const Tensor& ref, const char* name) {
  LT_CHECK(t.defined() && t.shape() == ref.shape() && t.dtype() == ref.dtype() && unit_d(t),
           std::string(op) + ": " + name + " must be " + dtype_name(ref.dtype()) + " " + shape_str(ref.shape()) +
               " with unit stride on the head dim",
           "the kernel writes it row by row (batch, head and time strides are free)", "");
}

template <class T> constexpr bool is_16bit() { return sizeof(T) == 2; }

// The tensor-core kernels move rows in 16-byte chunks: every row of every operand must start
// 16-byte aligned (base pointer and the strides of dims longer than 1 in multiples of 8 elements).
// Head dim 256 too unless LEANTRAIN_ATTN_MMA_D256=0 (checked against the CPU on an H100 at 1c36c36;
// 5.8x the Qwen3.5-2B LoRA step's throughput of the SIMT kernels).
bool use_mma(DType t, int64_t D, std::initializer_list<const Tensor*> ts) {
  static const bool d256 = knob_on("LEANTRAIN_ATTN_MMA_D256");
  if (t == DType::F32 || (D != 64 && D != 128 && !(D == 256 && d256))) return false;
  for (const Tensor* x : ts) {
    if ((reinterpret_cast<uintptr_t>(x->raw_data()) & 15u) != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (x->size(d) > 1 && x->strides()[size_t(d)] % 8 != 0) return false;
  }
  return true;
}

// Row layouts of every operand (see Rows).
struct FwdRows {
  Rows o, q, k, v;
};
struct BwdRows {
  Rows dq, dk, dv, dout, q, k, v, o;
};

// m-tiles of 16 query rows per warp in the forward (attn_fwd_mma's MT): 1, or 2 for D = 64 with
// LEANTRAIN_ATTN_FWD_MT=2 (the 128-row blocks; not yet the default: to be measured).
int fwd_m_tiles(int D) {
  static const int env = int(knob_int("LEANTRAIN_ATTN_FWD_MT"));
  return D == 64 ? env : 1;
}

template <class T, int D, int MT>
void fwd_mma_tiles(const AttnDims& a, const FwdRows& r, T* out, float* lse, const T* q, const T* k, const T* v,
                   const uint8_t* mask, bool causal, float scale) {
  constexpr int LD = row_stride<D>(), BQ = kBQ * MT;
  const size_t smem = size_t(BQ + 4 * kBK) * LD * sizeof(T);
  allow_smem(attn_fwd_mma<T, D, MT>, smem);
  const dim3 grid(unsigned(a.B * a.H), unsigned((a.Tq + BQ - 1) / BQ));
  attn_fwd_mma<T, D, MT><<<grid, kThreads, smem, current_stream()>>>(out, lse, q, k, v, mask, r.o, r.q, r.k, r.v,
                                                                      int(a.H), a.G(), int(a.Tq), int(a.Tk), causal,
                                                                      scale * kLog2e, a.band);
  LT_CUDA_LAUNCH_CHECK("attn_fwd_mma");
}

template <class T, int D>
void fwd_mma(const AttnDims& a, const FwdRows& r, T* out, float* lse, const T* q, const T* k, const T* v,
             const uint8_t* mask, bool causal, float scale) {
  if constexpr (D == 64) {
    if (fwd_m_tiles(D) == 2) return fwd_mma_tiles<T, D, 2>(a, r, out, lse, q, k, v, mask, causal, scale);
  }
  fwd_mma_tiles<T, D, 1>(a, r, out, lse, q, k, v, mask, causal, scale);
}

// Blocks of a cluster that split one key tile's query heads (the dK/dV kernel's S): with few kv
// heads the (batch, kv head, key tile) blocks do not fill the GPU (TinyLlama at B4 x T1024: 256
// blocks, the first key tile's walking 8 heads x 16 query tiles while most SMs idle), so the heads
// are split, 2 or 4 ways, until there are two waves of 3 blocks per SM. Thread block clusters need
// sm_90; LEANTRAIN_ATTN_DKDV_SPLITS=1, 2 or 4 forces it where G allows (the GPU checks use it).
int dkdv_splits(const AttnDims& a, int sms) {
  if (!cluster_launch_ok()) return 1;
  const int G = a.G();
  static const int forced = int(knob_int("LEANTRAIN_ATTN_DKDV_SPLITS"));
  if (forced > 0) {
    int want = forced;
    while (want > 1 && G % want != 0) want /= 2;
    return want;
  }
  const int64_t blocks = a.B * a.Hkv * ((a.Tk + kBK - 1) / kBK);
  int S = 1;
  while (S < 4 && G % (2 * S) == 0 && blocks * S < 6 * int64_t(sms)) S *= 2;
  return S;
}

// Where the backward keeps delta: in the borrowed cuBLASLt workspace when it holds B*H*Tq f32 and
// the backward runs on the compute stream (the workspace's stream); then the dQ kernel runs first
// and works delta out itself, and the separate delta kernel goes. Otherwise (or with
// LEANTRAIN_ATTN_OWN_DELTA=0) delta lives in dq's rows. No new allocation either way, so the plan
// does not depend on it.
float* delta_scratch(int dev, int64_t qrows) {
  static const bool on = knob_on("LEANTRAIN_ATTN_OWN_DELTA");
  if (!on) return nullptr;
  int64_t bytes = 0;
  void* ws = cublaslt_workspace_borrow(dev, &bytes);
  return ws && qrows * int64_t(sizeof(float)) <= bytes ? static_cast<float*>(ws) : nullptr;
}

template <class T, int D>
void bwd_mma(const AttnDims& a, const BwdRows& r, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
             const T* v, const T* out, const float* lse, const uint8_t* mask, bool causal, float scale, int sms,
             int dev) {
  constexpr int LD = row_stride<D>(), BQ = bwd_bq<D>();
  const int64_t qrows = a.B * a.H * a.Tq;
  float* delta = a.Tk > 0 && qrows > 0 ? delta_scratch(dev, qrows) : nullptr;
  auto run_dq = [&] {
    const size_t smem = size_t(2 * kBQ + 4 * kBK) * LD * sizeof(T);
    allow_smem(attn_bwd_dq_mma<T, D>, smem);
    const dim3 grid(unsigned(a.B * a.H), unsigned((a.Tq + kBQ - 1) / kBQ));
    attn_bwd_dq_mma<T, D><<<grid, kThreads, smem, current_stream()>>>(dq, q, k, v, dout, lse, mask, r.dq, r.q, r.k,
                                                                      r.v, r.dout, int(a.H), int(a.Tq), int(a.Tk),
                                                                      causal, scale, scale * kLog2e, a.G(), out, r.o,
                                                                      delta, a.band);
    LT_CUDA_LAUNCH_CHECK("attn_bwd_dq_mma");
  };
  if (delta) run_dq();  // 1. dQ, writing delta
  if (qrows > 0 && !delta) {  // 1. delta into dq's rows
    const int64_t threads = qrows * (D / 8);
    attn_delta_mma<T, D><<<unsigned((threads + 255) / 256), 256, 0, current_stream()>>>(dq, out, dout, r.dq, r.o,
                                                                                         r.dout, int(a.H), int(a.Tq),
                                                                                         qrows);
    LT_CUDA_LAUNCH_CHECK("attn_delta_mma");
  }
  if (a.Tk > 0) {  // 2. dK, dV, a block per (b, kv head, key tile) (with Tq = 0 the kernel writes zeros)
    const size_t smem = size_t(2 * kBK + 4 * BQ) * LD * sizeof(T);
    allow_smem(attn_bwd_dkdv_mma<T, D>, smem);
    const int S = dkdv_splits(a, sms);
    ClusterLaunch l(dim3(unsigned(a.B * a.Hkv * S), unsigned((a.Tk + kBK - 1) / kBK), unsigned(D / dkdv_cols<D>())),
                    dim3(kThreads), smem, current_stream(), S);
    LT_CUDA_CHECK(cudaLaunchKernelEx(&l.cfg, attn_bwd_dkdv_mma<T, D>, dk, dv, q, k, v, dout, lse, static_cast<const T*>(dq),
                                     mask, r.dk, r.dv, r.q, r.k, r.v, r.dout, r.dq, int(a.H), a.G(), int(a.Tq), int(a.Tk),
                                     causal, scale, scale * kLog2e, S, static_cast<const float*>(delta), a.band));
    LT_CUDA_LAUNCH_CHECK("attn_bwd_dkdv_mma");
  }
  if (qrows > 0 && !delta) run_dq();  // 3. dQ (overwrites the deltas; with Tk = 0 it writes zeros)
}

// Launch shape of a SIMT kernel: warps of kRpw rows over B*H*T rows, as many warps per block
// (1 to 4) as fit 96 KB of shared memory.
struct SimtLaunch {
  int64_t nwarps;
  int groups, wpb;
  size_t smem;
  unsigned blocks() const { return unsigned((nwarps + wpb - 1) / wpb); }
};
template <class Kern> SimtLaunch simt_launch(Kern kernel, int64_t bh, int64_t T, int64_t floats_per_warp) {
  SimtLaunch l;
  l.groups = int((T + kRpw - 1) / kRpw);
  l.nwarps = bh * l.groups;
  const size_t per_warp = size_t(floats_per_warp) * sizeof(float);
  l.wpb = int(std::clamp<size_t>(96 * 1024 / per_warp, 1, 4));
  l.smem = per_warp * size_t(l.wpb);
  allow_smem(kernel, l.smem);
  return l;
}

void check_simt(const char* op, const AttnDims& a, DType t) {
  LT_CHECK(a.D <= kSimtMaxD, std::string(op) + ": head dim " + std::to_string(a.D) + " is too large",
           "the CUDA attention kernels take head dims up to 512", "use more heads");
  LT_CHECK(a.D * int64_t(dtype_size(t)) >= 4, std::string(op) + ": head dim " + std::to_string(a.D) + " in " + dtype_name(t),
           "the backward keeps a 4-byte statistic in each dq row", "use a head dim of at least 2");
}


// ---- the register-tiled f32 path

// THE switch for the f32 path: true when the register-tiled f32 kernels take this call (head
// dim 32, 64 or 128; every row 16-byte aligned). Returning false sends every f32 call back to
// the warp-per-4-rows SIMT kernels. Setting LEANTRAIN_ATTN_F32_SIMT=1 in the environment does
// the same at run time (gpu_checks uses it to time both paths).
bool use_fast_f32_attention(DType t, int64_t D, std::initializer_list<const Tensor*> ts) {
  if (t != DType::F32 || (D != 32 && D != 64 && D != 128)) return false;
  static const bool simt_only = knob_on("LEANTRAIN_ATTN_F32_SIMT");
  if (simt_only) return false;
  for (const Tensor* x : ts) {
    if ((reinterpret_cast<uintptr_t>(x->raw_data()) & 15u) != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (x->size(d) > 1 && x->strides()[size_t(d)] % 4 != 0) return false;
  }
  return true;
}

template <int D>
void fwd_f32(const AttnDims& a, const FwdRows& r, float* out, float* lse, const float* q, const float* k,
             const float* v, const uint8_t* mask, bool causal, float scale) {
  constexpr size_t smem = f_fwd_smem<D>();
  allow_smem(attn_fwd_f32<D>, smem);
  const dim3 grid(unsigned(a.B * a.H), unsigned((a.Tq + kFB - 1) / kFB));
  attn_fwd_f32<D><<<grid, kFT, smem, current_stream()>>>(out, lse, q, k, v, mask, r.o, r.q, r.k, r.v, int(a.H),
                                                         a.G(), int(a.Tq), int(a.Tk), causal, scale, a.band);
  LT_CUDA_LAUNCH_CHECK("attn_fwd_f32");
}

template <int D>
void bwd_f32(const AttnDims& a, const BwdRows& r, float* dq, float* dk, float* dv, const float* dout, const float* q,
             const float* k, const float* v, const float* out, const float* lse, const uint8_t* mask, bool causal,
             float scale) {
  const int64_t qrows = a.B * a.H * a.Tq;
  if (qrows > 0) {  // 1. delta into dq's rows (the SIMT kernel: one warp per row)
    attn_delta_simt<float><<<unsigned((qrows + 7) / 8), 256, 0, current_stream()>>>(
        dq, out, dout, r.dq, r.o, r.dout, int(a.H), int(a.Tq), qrows, int(a.D));
    LT_CUDA_LAUNCH_CHECK("attn_delta_simt");
  }
  if (a.Tk > 0) {  // 2. dK, dV, a block per (b, kv head, key tile) (with Tq = 0 the kernel writes zeros)
    constexpr size_t smem = f_dkdv_smem<D>();
    allow_smem(attn_bwd_dkdv_f32<D>, smem);
    const dim3 grid(unsigned(a.B * a.Hkv), unsigned((a.Tk + kFB - 1) / kFB));
    attn_bwd_dkdv_f32<D><<<grid, kFT, smem, current_stream()>>>(dk, dv, q, k, v, dout, lse, dq, mask, r.dk, r.dv,
                                                                r.q, r.k, r.v, r.dout, r.dq, int(a.H), a.G(),
                                                                int(a.Tq), int(a.Tk), causal, scale, a.band);
    LT_CUDA_LAUNCH_CHECK("attn_bwd_dkdv_f32");
  }
  if (qrows > 0) {  // 3. dQ (overwrites the deltas; with Tk = 0 it writes zeros)
    constexpr size_t smem = f_dq_smem<D>();
    allow_smem(attn_bwd_dq_f32<D>, smem);
    const dim3 grid(unsigned(a.B * a.H), unsigned((a.Tq + kFB - 1) / kFB));
    attn_bwd_dq_f32<D><<<grid, kFT, smem, current_stream()>>>(dq, q, k, v, dout, lse, mask, r.dq, r.q, r.k, r.v,
                                                              r.dout, int(a.H), a.G(), int(a.Tq), int(a.Tk), causal,
                                                              scale, a.band);
    LT_CUDA_LAUNCH_CHECK("attn_bwd_dq_f32");
  }
}

}  // namespace

void CudaBackend::attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& mask, bool causal, int64_t window,
                                const Tensor& doc_pos, float scale) {
  const char* op = "attention_fwd";
  AttnDims a = check_attention(op, q, k, v, lse, mask);
  a.band = check_band(op, a, causal, window, doc_pos, q.device());
  check_like(op, out, q, "out");
  if (a.B * a.H * a.Tq == 0) return;
  const FwdRows r{rows_of(out), rows_of(q), rows_of(k), rows_of(v)};
  const uint8_t* pm = mask.defined() ? mask.data<uint8_t>() : nullptr;
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    if constexpr (is_16bit<T>()) {
      if (use_mma(q.dtype(), a.D, {&out, &q, &k, &v})) {
        if (a.D == 64) fwd_mma<T, 64>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        else if (a.D == 128) fwd_mma<T, 128>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        else fwd_mma<T, 256>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        return;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      if (use_fast_f32_attention(q.dtype(), a.D, {&out, &q, &k, &v})) {
        if (a.D == 32) fwd_f32<32>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        else if (a.D == 64) fwd_f32<64>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        else fwd_f32<128>(a, r, po, lse.data<float>(), pq, pk, pv, pm, causal, scale);
        return;
      }
    }
    check_simt(op, a, q.dtype());
    const SimtLaunch L = simt_launch(attn_fwd_simt<T>, a.B * a.H, a.Tq, simt_fwd_floats(a.D));
    attn_fwd_simt<T><<<L.blocks(), L.wpb * 32, L.smem, current_stream()>>>(
        po, lse.data<float>(), pq, pk, pv, pm, r.o, r.q, r.k, r.v, L.nwarps, L.groups, int(a.H), a.G(), int(a.Tq),
        int(a.Tk), int(a.D), causal, scale, a.band);
    LT_CUDA_LAUNCH_CHECK("attn_fwd_simt");
  });
}

void CudaBackend::attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& lse, const Tensor& mask, bool causal, int64_t window,
                                const Tensor& doc_pos, float scale) {
  const char* op = "attention_bwd";
  AttnDims a = check_attention(op, q, k, v, lse, mask);
  a.band = check_band(op, a, causal, window, doc_pos, q.device());
  check_like(op, dq, q, "dq");
  check_like(op, dk, k, "dk");
  check_like(op, dv, v, "dv");
  check_like(op, dout, q, "dout");
  check_like(op, out, q, "out");
  if (a.B * a.H == 0) return;
  const BwdRows r{rows_of(dq), rows_of(dk), rows_of(dv), rows_of(dout), rows_of(q), rows_of(k), rows_of(v), rows_of(out)};
  const uint8_t* pm = mask.defined() ? mask.data<uint8_t>() : nullptr;
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();
    const T *pdo = dout.data<T>(), *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *po = out.data<T>();
    const float* pl = lse.data<float>();
    if constexpr (is_16bit<T>()) {
      if (use_mma(q.dtype(), a.D, {&dq, &dk, &dv, &dout, &q, &k, &v, &out})) {
        const int sms = device_state(device_index_).sm_count;
        if (a.D == 64) bwd_mma<T, 64>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale, sms, device_index_);
        else if (a.D == 128)
          bwd_mma<T, 128>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale, sms, device_index_);
        else bwd_mma<T, 256>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale, sms, device_index_);
        return;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      if (use_fast_f32_attention(q.dtype(), a.D, {&dq, &dk, &dv, &dout, &q, &k, &v, &out})) {
        if (a.D == 32) bwd_f32<32>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale);
        else if (a.D == 64) bwd_f32<64>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale);
        else bwd_f32<128>(a, r, pdq, pdk, pdv, pdo, pq, pk, pv, po, pl, pm, causal, scale);
        return;
      }
    }
    check_simt(op, a, q.dtype());
    // Same three steps as the tensor-core path: delta into dq rows, dK/dV, then dQ.
    const int64_t qrows = a.B * a.H * a.Tq, krows = a.B * a.Hkv * a.Tk;
    if (qrows > 0) {
      attn_delta_simt<T><<<unsigned((qrows + 7) / 8), 256, 0, current_stream()>>>(pdq, po, pdo, r.dq, r.o, r.dout,
                                                                                  int(a.H), int(a.Tq), qrows, int(a.D));
      LT_CUDA_LAUNCH_CHECK("attn_delta_simt");
    }
    if (krows > 0) {
      // warps over (b, kv head, 4 key rows), each looping over its group's query heads
      const SimtLaunch L = simt_launch(attn_bwd_dkdv_simt<T>, a.B * a.Hkv, a.Tk, simt_dkdv_floats(a.D));
      attn_bwd_dkdv_simt<T><<<L.blocks(), L.wpb * 32, L.smem, current_stream()>>>(
          pdk, pdv, pq, pk, pv, pdo, pl, pdq, pm, r.dk, r.dv, r.q, r.k, r.v, r.dout, r.dq, L.nwarps, L.groups, int(a.H),
          a.G(), int(a.Tq), int(a.Tk), int(a.D), causal, scale, a.band);
      LT_CUDA_LAUNCH_CHECK("attn_bwd_dkdv_simt");
    }
    if (qrows > 0) {
      const SimtLaunch L = simt_launch(attn_bwd_dq_simt<T>, a.B * a.H, a.Tq, simt_dq_floats(a.D));
      attn_bwd_dq_simt<T><<<L.blocks(), L.wpb * 32, L.smem, current_stream()>>>(
          pdq, pq, pk, pv, pdo, pl, pm, r.dq, r.q, r.k, r.v, r.dout, L.nwarps, L.groups, int(a.H), a.G(), int(a.Tq),
          int(a.Tk), int(a.D), causal, scale, a.band);
      LT_CUDA_LAUNCH_CHECK("attn_bwd_dq_simt");
    }
  });
}

}  // namespace lt
