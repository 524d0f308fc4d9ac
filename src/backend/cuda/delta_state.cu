// The Gated DeltaNet's sequential state passes (gdn_state_fwd, gdn_state_bwd), register-tiled and
// pipelined: the form delta.cu's kernels take where the shapes allow (delta_state.h).
//
// Why: the one-output-a-thread kernels in delta.cu spend two or three shared-memory loads on each
// multiply-add, and wait for each chunk's rows before using them. On an H200 at the 2B
// shape (16 heads of 128, chunks of 64, T 4096) they took 1.4 ms forward and 2.2 ms backward a
// layer, a third of a Qwen3.5 LoRA step (bench/results/issues44-46-h200-de67526.md). Here:
// - each thread owns a small tile of outputs in registers (a row and four value columns for the
//   chunk-row products, four state rows and two columns for the state products), so a float4 or
//   float2 load serves four to eight multiply-adds; the state (or its gradient) stays in the
//   owners' registers across chunks, mirrored to shared memory for the other product;
// - the staged rows have a padded stride (Dk + 4 floats), so the eight rows a warp reads at one
//   column fall in eight banks;
// - the next rows arrive by cp.async while the current product runs: each staged matrix is needed
//   by one of the two phases of a chunk, so it is loaded during the other phase.
// Every output's sum runs over the same terms in the same order as delta.cu's kernels and
// cpu_delta.cpp's reference, so the results are the same bits (GatedDelta.CudaTiledStatePasses-
// GiveTheUntiledBits; LEANTRAIN_GDN_TILED=0 runs delta.cu's instead).
//
// Layout: one block of 256 threads per (sequence bh, 16 value columns), as in delta.cu; Dk <= 128
// and a multiple of 4, C <= 64 and a multiple of 4 (the 16-byte copies); delta_state.h says which.
#include "backend/cuda/delta_state.h"

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma.cuh"
#include "core/knobs.h"

namespace lt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kCols = 16;   // value columns of a block's state slice
constexpr int kRows = 64;   // the largest chunk
constexpr int kMaxDk = 128;  // 32 row groups of 4 in the state products

using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;

// 4-byte global -> shared copy (value columns: Dv need not be a multiple of 4).
__device__ __forceinline__ void cp_async4(float* smem, const float* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mma::smem_u32(smem)), "l"(gmem) : "memory");
}

// Rows [0, C) of a [C, Dk] f32 block (global, 16-byte aligned) into shared rows of stride ld.
__device__ __forceinline__ void stage_rows_async(float* dst, const float* src, int C, int Dk, int ld) {
  const int q = Dk >> 2;
  for (int e = threadIdx.x; e < C * q; e += kThreads) {
    const int r = e / q, x = e - r * q;
    cp_async16(dst + r * ld + 4 * x, src + int64_t(r) * Dk + 4 * x, true);
  }
}

// Columns j0 .. j0 + nc of C rows of a [rows, Dv] matrix into shared [C, kCols] (the other
// columns stay as the caller zeroed them).
__device__ __forceinline__ void stage_cols_async(float* dst, const float* src, int C, int Dv, int nc) {
  for (int e = threadIdx.x; e < C * kCols; e += kThreads) {
    const int t = e / kCols, jj = e - t * kCols;
    if (jj < nc) cp_async4(dst + e, src + int64_t(t) * Dv + jj);
  }
}

// Thread tiles. Chunk-row products (delta, ddelta): row ta, columns ja .. ja + 3. State products
// (S, dS): rows ib .. ib + 3, columns jb, jb + 1.
struct Tiles {
  int ta, ja, ib, jb;
  __device__ Tiles() {
    const int t = threadIdx.x;
    ta = t >> 2, ja = (t & 3) * 4, ib = (t >> 3) * 4, jb = (t & 7) * 2;
  }
};

// The state tile's values into a [Dk, Dv] slab (columns j0 + jb, j0 + jb + 1 where < nc).
__device__ __forceinline__ void store_state_tile(float* slab, const float (&s)[4][2], const Tiles& tl, int Dk, int Dv,
                                                 int j0, int nc) {
  if (tl.ib >= Dk) return;
  for (int r = 0; r < 4; ++r)
    for (int q = 0; q < 2; ++q)
      if (tl.jb + q < nc) slab[int64_t(tl.ib + r) * Dv + j0 + tl.jb + q] = s[r][q];
}

__global__ void __launch_bounds__(kThreads) state_fwd_kernel(float* states, float* delta, const float* u,
                                                                const float* w, const float* kn, const float* gam,
                                                                int NC, int C, int Dk, int Dv, GdnDocs docs) {
  extern __shared__ __align__(16) float sh[];
  const int ld = Dk + 4;
  float *S = sh, *dl = S + Dk * kCols, *ek = dl + kRows * kCols, *ws = ek + kRows, *ks = ws + kRows * ld;
  const int64_t bh = blockIdx.x, Tp = int64_t(NC) * C;
  const int j0 = blockIdx.y * kCols, nc = Dv - j0 < kCols ? Dv - j0 : kCols;
  const Tiles tl;
  float s[4][2] = {};
  for (int e = threadIdx.x; e < Dk * kCols; e += kThreads) S[e] = 0.f;
  for (int e = threadIdx.x; e < kRows * kCols; e += kThreads) dl[e] = 0.f;
  store_state_tile(states + bh * NC * Dk * Dv, s, tl, Dk, Dv, j0, nc);
  stage_rows_async(ws, w + bh * Tp * Dk, C, Dk, ld);
  cp_async_commit();
  for (int c = 0; c < NC; ++c) {
    const int64_t r0 = bh * Tp + int64_t(c) * C;
    cp_async_wait<0>();
    __syncthreads();  // w's rows are in; S holds the state at the chunk's start
    stage_rows_async(ks, kn + r0 * Dk, C, Dk, ld);  // needed by the state product below
    cp_async_commit();
    const int sl = docs.start(bh * NC + c, C - 1);
    const float gl = gam[r0 + C - 1];
    if (threadIdx.x < C) ek[threadIdx.x] = int(threadIdx.x) >= sl ? expf(gl - gam[r0 + threadIdx.x]) : 0.f;
    // delta = u - W S: row ta, four columns.
    if (tl.ta < C) {
      const float* wr = ws + tl.ta * ld;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      for (int i = 0; i < Dk; ++i) {
        const float wv = wr[i];
        const float4 sv = *reinterpret_cast<const float4*>(S + i * kCols + tl.ja);
        a0 += wv * sv.x, a1 += wv * sv.y, a2 += wv * sv.z, a3 += wv * sv.w;
      }
      const float acc[4] = {a0, a1, a2, a3};
      for (int q = 0; q < 4; ++q) {
        const int jj = tl.ja + q;
        if (jj < nc) {
          const int64_t at = (r0 + tl.ta) * Dv + j0 + jj;
          const float d = u[at] - acc[q];
          dl[tl.ta * kCols + jj] = d;
          delta[at] = d;
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // kn's rows, ek and delta are in; w's buffer is free
    if (c + 1 < NC) stage_rows_async(ws, w + (r0 + C) * Dk, C, Dk, ld);  // the next chunk's
    cp_async_commit();
    // S = exp(gam_last) S + (ek K)^T delta: four rows, two columns, kept in registers.
    if (tl.ib < Dk) {
      const float el = sl < 0 ? expf(gl) : 0.f;
      float acc[4][2] = {};
      for (int t = 0; t < C; ++t) {
        const float e = ek[t];
        const float4 kv = *reinterpret_cast<const float4*>(ks + t * ld + tl.ib);
        const float2 dv = *reinterpret_cast<const float2*>(dl + t * kCols + tl.jb);
        const float k4[4] = {e * kv.x, e * kv.y, e * kv.z, e * kv.w};
        for (int r = 0; r < 4; ++r) acc[r][0] += k4[r] * dv.x, acc[r][1] += k4[r] * dv.y;
      }
      for (int r = 0; r < 4; ++r) {
        for (int q = 0; q < 2; ++q) s[r][q] = el * s[r][q] + acc[r][q];
        *reinterpret_cast<float2*>(S + (tl.ib + r) * kCols + tl.jb) = make_float2(s[r][0], s[r][1]);
      }
      if (c + 1 < NC) store_state_tile(states + (bh * NC + c + 1) * Dk * Dv, s, tl, Dk, Dv, j0, nc);
    }
  }
  cp_async_wait<0>();
}

__global__ void __launch_bounds__(kThreads) state_bwd_kernel(float* dsend, float* ddelta, const float* dout,
                                                                const float* p, const float* w, const float* qn,
                                                                const float* kn, const float* gam, int NC, int C,
                                                                int Dk, int Dv, GdnDocs docs) {
  extern __shared__ __align__(16) float sh[];
  const int ld = Dk + 4;
  float *dS = sh, *dd = dS + Dk * kCols, *eq = dd + kRows * kCols, *ps = eq + kRows, *dos = ps + kRows * kRows,
        *qs = dos + 2 * kRows * kCols, *ks = qs + kRows * ld, *wsm = ks + kRows * ld;
  const int64_t bh = blockIdx.x, Tp = int64_t(NC) * C;
  const int j0 = blockIdx.y * kCols, nc = Dv - j0 < kCols ? Dv - j0 : kCols;
  const Tiles tl;
  float s[4][2] = {};
  for (int e = threadIdx.x; e < Dk * kCols; e += kThreads) dS[e] = 0.f;
  for (int e = threadIdx.x; e < kRows * kCols; e += kThreads) dd[e] = 0.f;
  for (int e = threadIdx.x; e < 2 * kRows * kCols; e += kThreads) dos[e] = 0.f;
  __syncthreads();  // dout's unused columns stay 0
  auto stage_phase1 = [&](int c, float* dbuf) {  // p, kn and dout's columns of chunk c
    const int64_t r0 = bh * Tp + int64_t(c) * C;
    const float* pp = p + (bh * NC + c) * int64_t(C) * C;
    for (int e = threadIdx.x; e < C * C / 4; e += kThreads) cp_async16(ps + 4 * e, pp + 4 * e, true);
    stage_rows_async(ks, kn + r0 * Dk, C, Dk, ld);
    stage_cols_async(dbuf, dout + r0 * Dv + j0, C, Dv, nc);
    cp_async_commit();
  };
  stage_phase1(NC - 1, dos + ((NC - 1) & 1) * kRows * kCols);
  for (int c = NC - 1; c >= 0; --c) {
    const int64_t r0 = bh * Tp + int64_t(c) * C, n = bh * NC + c;
    const float* dc = dos + (c & 1) * kRows * kCols;
    cp_async_wait<0>();
    __syncthreads();  // chunk c's p, kn, dout are in; dS holds the gradient of the state after the chunk
    stage_rows_async(qs, qn + r0 * Dk, C, Dk, ld);  // for the state product below
    stage_rows_async(wsm, w + r0 * Dk, C, Dk, ld);
    cp_async_commit();
    store_state_tile(dsend + n * Dk * Dv, s, tl, Dk, Dv, j0, nc);
    const int sl = docs.start(n, C - 1);
    const float gl = gam[r0 + C - 1];
    if (threadIdx.x < C) eq[threadIdx.x] = docs.start(n, threadIdx.x) < 0 ? expf(gam[r0 + threadIdx.x]) : 0.f;
    // ddelta = P^T dout + ek (K dS): row ta, four columns.
    if (tl.ta < C) {
      const int t = tl.ta;
      float a1[4] = {}, a2[4] = {};
      for (int x = 0; x < C; ++x) {
        const float pv = ps[x * C + t];
        const float4 dv = *reinterpret_cast<const float4*>(dc + x * kCols + tl.ja);
        a1[0] += pv * dv.x, a1[1] += pv * dv.y, a1[2] += pv * dv.z, a1[3] += pv * dv.w;
      }
      const float* kr = ks + t * ld;
      for (int i = 0; i < Dk; ++i) {
        const float kv = kr[i];
        const float4 sv = *reinterpret_cast<const float4*>(dS + i * kCols + tl.ja);
        a2[0] += kv * sv.x, a2[1] += kv * sv.y, a2[2] += kv * sv.z, a2[3] += kv * sv.w;
      }
      const float ek = t >= sl ? expf(gl - gam[r0 + t]) : 0.f;
      for (int q = 0; q < 4; ++q) {
        const int jj = tl.ja + q;
        const float d = a1[q] + ek * a2[q];
        dd[t * kCols + jj] = d;  // 0 past nc: dout's and dS's columns there are 0
        if (jj < nc) ddelta[(r0 + t) * Dv + j0 + jj] = d;
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // qn, w, eq and ddelta are in; p's and kn's buffers are free
    if (c > 0) stage_phase1(c - 1, dos + ((c - 1) & 1) * kRows * kCols);
    // dS = exp(gam_last) dS + (eq Q)^T dout - W^T ddelta: four rows, two columns.
    if (tl.ib < Dk) {
      const float el = sl < 0 ? expf(gl) : 0.f;
      float a1[4][2] = {}, a2[4][2] = {};
      for (int t = 0; t < C; ++t) {
        const float e = eq[t];
        const float4 qv = *reinterpret_cast<const float4*>(qs + t * ld + tl.ib);
        const float4 wv = *reinterpret_cast<const float4*>(wsm + t * ld + tl.ib);
        const float2 dv = *reinterpret_cast<const float2*>(dc + t * kCols + tl.jb);
        const float2 xv = *reinterpret_cast<const float2*>(dd + t * kCols + tl.jb);
        const float q4[4] = {e * qv.x, e * qv.y, e * qv.z, e * qv.w}, w4[4] = {wv.x, wv.y, wv.z, wv.w};
        for (int r = 0; r < 4; ++r) {
          a1[r][0] += q4[r] * dv.x, a1[r][1] += q4[r] * dv.y;
          a2[r][0] += w4[r] * xv.x, a2[r][1] += w4[r] * xv.y;
        }
      }
      for (int r = 0; r < 4; ++r) {
        for (int q = 0; q < 2; ++q) s[r][q] = el * s[r][q] + a1[r][q] - a2[r][q];
        *reinterpret_cast<float2*>(dS + (tl.ib + r) * kCols + tl.jb) = make_float2(s[r][0], s[r][1]);
      }
    }
  }
  cp_async_wait<0>();
}

// Read at each call (two a layer), so a test can run both kernels in one process.
bool tiled_on() { return knob_on("LEANTRAIN_GDN_TILED"); }

bool tiled_shapes(int C, int Dk) { return tiled_on() && Dk % 4 == 0 && Dk <= kMaxDk && C % 4 == 0 && C <= kRows; }

size_t fwd_smem(int Dk) { return sizeof(float) * size_t(Dk * kCols + kRows * kCols + kRows + 2 * kRows * (Dk + 4)); }
size_t bwd_smem(int Dk) {
  return sizeof(float) *
         size_t(Dk * kCols + kRows * kCols + kRows + kRows * kRows + 2 * kRows * kCols + 3 * kRows * (Dk + 4));
}

}  // namespace

bool gdn_state_fwd_tiled(float* states, float* delta, const float* u, const float* w, const float* kn,
                         const float* gam, int64_t BH, int NC, int C, int Dk, int Dv, const GdnDocs& docs,
                         cudaStream_t stream) {
  if (!tiled_shapes(C, Dk)) return false;
  const size_t smem = fwd_smem(Dk);
  allow_smem(state_fwd_kernel, smem);
  const dim3 grid(unsigned(BH), unsigned((Dv + kCols - 1) / kCols));
  state_fwd_kernel<<<grid, kThreads, smem, stream>>>(states, delta, u, w, kn, gam, NC, C, Dk, Dv, docs);
  LT_CUDA_LAUNCH_CHECK("gdn_state_fwd_tiled (state_fwd_kernel)");
  return true;
}

bool gdn_state_bwd_tiled(float* dsend, float* ddelta, const float* dout, const float* p, const float* w,
                         const float* qn, const float* kn, const float* gam, int64_t BH, int NC, int C, int Dk,
                         int Dv, const GdnDocs& docs, cudaStream_t stream) {
  if (!tiled_shapes(C, Dk)) return false;
  const size_t smem = bwd_smem(Dk);
  allow_smem(state_bwd_kernel, smem);
  const dim3 grid(unsigned(BH), unsigned((Dv + kCols - 1) / kCols));
  state_bwd_kernel<<<grid, kThreads, smem, stream>>>(dsend, ddelta, dout, p, w, qn, kn, gam, NC, C, Dk, Dv, docs);
  LT_CUDA_LAUNCH_CHECK("gdn_state_bwd_tiled (state_bwd_kernel)");
  return true;
}

}  // namespace lt::cuda
