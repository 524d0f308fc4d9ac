// Gated DeltaNet on CUDA: the small kernels of the chunked gated delta rule (ops/gated_delta.cpp
// runs the GEMMs between them through cuBLASLt) and the decay. f32 throughout (the chunk layout's
// accumulation type); every sum runs in a fixed order, no atomics, so results repeat bit for bit.
//
// - Elementwise ops (prepare, output, pack, decay, finish's v/beta/g parts): grid-stride loops,
//   one warp a row where a row needs a reduction (the l2norms).
// - Per-chunk matrix work (tri_fwd, tri_bwd, decay_mask_bwd, rows_bwd): one block a chunk, its
//   C x C matrices (C <= 64) in shared memory; T = (I + M)^-1 by forward substitution, a
//   __syncthreads per row.
// - The sequential passes (state_fwd, state_bwd): one block per (b, h) and 16 value columns,
//   its Dk x 16 slice of the state (or its gradient) in shared memory for the whole sequence; the
//   columns of the state never mix in the recurrence, so the slices run independently. Each
//   chunk's rows (w, kn; and p, qn, dout backward) are staged in shared memory first
//   (LEANTRAIN_GDN_STAGE_ROWS=0: read in place).
// Each mirrors its reference in cpu_delta.cpp line by line (the same sums in the same order, in
// f32), which backend_ops.def ("delta") states. Packed documents (doc_pos) mask inside the chunks
// through GdnDocs (backend/delta_docs.h), read by each kernel from doc_pos itself: the per-chunk
// kernels keep their chunk's document starts in shared memory.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/delta_state.h"
#include "backend/delta_docs.h"
#include "core/knobs.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;
constexpr int kCols = 16;  // value columns of a state slice (state_fwd, state_bwd): 8 blocks a head at Dv 128
// Shared memory the sequential passes may take to stage a chunk's rows (Hopper allows 227 KB a
// block): Dk 128 at chunk 64 takes 78 KB forward, 130 KB backward.
constexpr size_t kStageSmem = 200 * 1024;
// The staged passes unless LEANTRAIN_GDN_STAGE_ROWS=0 (the same bits either way: checked on an H100
// at 1c36c36).
bool stage_rows_on() {
  static const bool on = knob_on("LEANTRAIN_GDN_STAGE_ROWS");
  return on;
}

struct View4 {
  int64_t s0, s1, s2;  // strides of [B, T, H, D] (unit stride on D)
};
View4 view4(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2]}; }

void check_acc(const Tensor& t, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.dtype() == DType::F32 && t.is_contiguous(),
           std::string(op) + ": " + name + " must be a contiguous f32 tensor", "the chunk layout is f32 on CUDA",
           "");
}

// ---------------------------------------------------------------- prepare

// One warp a row (bh, t) of the chunk layout: the l2-normalised q and k of its key head, v, beta.
template <class T>
__global__ void gdn_prepare_kernel(float* qn, float* kn, float* vf, float* bf, const T* q, const T* k, const T* v,
                                   const T* beta, int64_t rows, int64_t Tlen, int64_t Tp, int Hk, int Hv, int Dk,
                                   int Dv, View4 qs, View4 ks, View4 vs, float scale) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int G = Hv / Hk;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const int64_t bh = row / Tp, t = row - bh * Tp;
    const int64_t b = bh / Hv;
    const int h = int(bh - b * Hv), hk = h / G;
    float* oq = qn + row * Dk;
    float* ok = kn + row * Dk;
    float* ov = vf + row * Dv;
    if (t >= Tlen) {
      for (int i = lane; i < Dk; i += 32) oq[i] = ok[i] = 0.f;
      for (int j = lane; j < Dv; j += 32) ov[j] = 0.f;
      if (lane == 0) bf[row] = 0.f;
      continue;
    }
    const T* xq = q + b * qs.s0 + t * qs.s1 + hk * qs.s2;
    const T* xk = k + b * ks.s0 + t * ks.s1 + hk * ks.s2;
    float sq = 0.f, sk = 0.f;
    for (int i = lane; i < Dk; i += 32) {
      const float a = load_t(xq, i), c = load_t(xk, i);
      sq += a * a;
      sk += c * c;
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float rq = 1.f / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
    for (int i = lane; i < Dk; i += 32) {
      oq[i] = load_t(xq, i) * rq * scale;
      ok[i] = load_t(xk, i) * rk;
    }
    const T* xv = v + b * vs.s0 + t * vs.s1 + h * vs.s2;
    for (int j = lane; j < Dv; j += 32) ov[j] = load_t(xv, j);
    if (lane == 0) bf[row] = load_t(beta, (b * Tlen + t) * Hv + h);
  }
}

// One thread a chunk: gam = the cumulative sum of g within it (g = 0 on the padding rows),
// restarting at each document's start.
__global__ void gdn_cumsum_kernel(float* gam, const float* g, int64_t chunks, int64_t Tlen, int64_t Tp, int Hv, int C,
                                  GdnDocs docs) {
  const int64_t nc = Tp / C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / nc, c = i - bh * nc, b = bh / Hv, h = bh - b * Hv;
    float cum = 0.f;
    for (int j = 0; j < C; ++j) {
      const int64_t t = c * C + j;
      if (docs.start(i, j) == j) cum = 0.f;
      if (t < Tlen) cum += g[(b * Tlen + t) * Hv + h];
      gam[bh * Tp + t] = cum;
    }
  }
}

// ---------------------------------------------------------------- chunk matrices

// M and T = (I + M)^-1 of chunk n into shared m, tm (C x C each); b, g, st: the chunk's bf, gam and
// document starts in shared memory. Ends synchronised.
__device__ void chunk_m_and_t(float* m, float* tm, const float* kk, const float* b, const float* g, const int* st, int C) {
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int i = e / C, s = e - i * C;
    m[e] = s < i && s >= st[i] ? b[i] * expf(g[i] - g[s]) * kk[e] : 0.f;
    tm[e] = i == s ? 1.f : 0.f;
  }
  __syncthreads();
  for (int i = 1; i < C; ++i) {
    for (int s = threadIdx.x; s < i; s += blockDim.x) {
      float acc = 0.f;
      for (int j = s; j < i; ++j) acc += m[i * C + j] * tm[j * C + s];
      tm[i * C + s] = -acc;
    }
    __syncthreads();
  }
}

__device__ void load_chunk_vectors(float* b, float* g, int* st, const float* bf, const float* gam, const GdnDocs& docs,
                                   int64_t n, int C) {
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    b[i] = bf[n * C + i];
    g[i] = gam[n * C + i];
    st[i] = docs.start(n, i);
  }
  __syncthreads();
}

__global__ void gdn_tri_fwd_kernel(float* t_out, float* tb, float* tk, const float* kk, const float* bf,
                                   const float* gam, int C, GdnDocs docs) {
  extern __shared__ float sh[];
  float *m = sh, *tm = m + C * C, *b = tm + C * C, *g = b + C;
  int* st = reinterpret_cast<int*>(g + C);
  const int64_t n = blockIdx.x;
  load_chunk_vectors(b, g, st, bf, gam, docs, n, C);
  chunk_m_and_t(m, tm, kk + n * C * C, b, g, st, C);
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int s = e % C;
    const float x = tm[e];
    tb[n * C * C + e] = x * b[s];
    tk[n * C * C + e] = st[s] < 0 ? x * b[s] * expf(g[s]) : 0.f;
    if (t_out) t_out[n * C * C + e] = x;
  }
}

__global__ void gdn_decay_mask_kernel(float* p, const float* gam, int64_t total, int C, GdnDocs docs) {
  const int64_t cc = int64_t(C) * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / cc;
    const int r = int(e - n * cc), t = r / C, s = r - t * C;
    p[e] = s <= t && s >= docs.start(n, t) ? p[e] * expf(gam[n * C + t] - gam[n * C + s]) : 0.f;
  }
}

// ---------------------------------------------------------------- sequential passes

// Rows [r0, r0 + C) of a [rows, D] f32 matrix into shared memory (rows contiguous, D floats
// each), the whole block copying; 16-byte copies when D allows.
__device__ void stage_rows(float* dst, const float* src, int64_t r0, int C, int D) {
  const float* g = src + r0 * D;
  const int n = C * D;
  if ((D & 3) == 0 && ((reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0) {
    for (int e = threadIdx.x; e < n / 4; e += blockDim.x)
      reinterpret_cast<float4*>(dst)[e] = reinterpret_cast<const float4*>(g)[e];
  } else {
    for (int e = threadIdx.x; e < n; e += blockDim.x) dst[e] = g[e];
  }
}

// kStage: the chunk's rows of w and kn are first copied to shared memory, so the two products
// below read them there instead of from L2 at every step of their dot products (which made the
// kernel latency-bound); the same sums in the same order either way. Without kStage
// (LEANTRAIN_GDN_STAGE_ROWS=0, or a Dk too large for the shared memory) they are read in place.
template <bool kStage>
__global__ void gdn_state_fwd_kernel(float* states, float* delta, const float* u, const float* w, const float* kn,
                                     const float* gam, int NC, int C, int Dk, int Dv, GdnDocs docs) {
  extern __shared__ float sh[];
  float *S = sh, *dl = S + Dk * kCols, *ek = dl + C * kCols, *ws = ek + C, *ks = ws + C * Dk;
  const int64_t bh = blockIdx.x, Tp = int64_t(NC) * C;
  const int j0 = blockIdx.y * kCols, nc = Dv - j0 < kCols ? Dv - j0 : kCols;
  for (int e = threadIdx.x; e < Dk * kCols; e += blockDim.x) S[e] = 0.f;
  __syncthreads();
  for (int c = 0; c < NC; ++c) {
    const int64_t r0 = bh * Tp + int64_t(c) * C;
    const float *wc = w + r0 * Dk, *kc = kn + r0 * Dk;
    if (kStage) {
      stage_rows(ws, w, r0, C, Dk);
      stage_rows(ks, kn, r0, C, Dk);
      wc = ws, kc = ks;
      __syncthreads();
    }
    float* st = states + (bh * NC + c) * Dk * Dv;
    for (int e = threadIdx.x; e < Dk * nc; e += blockDim.x) {
      const int i = e / nc, jj = e - i * nc;
      st[int64_t(i) * Dv + j0 + jj] = S[i * kCols + jj];
    }
    for (int e = threadIdx.x; e < C * nc; e += blockDim.x) {
      const int t = e / nc, jj = e - t * nc;
      const float* wr = wc + t * Dk;
      float acc = 0.f;
      for (int i = 0; i < Dk; ++i) acc += wr[i] * S[i * kCols + jj];
      const float d = u[(r0 + t) * Dv + j0 + jj] - acc;
      dl[t * kCols + jj] = d;
      delta[(r0 + t) * Dv + j0 + jj] = d;
    }
    // The next state is the last row's document's (its rows; the carried state only when that
    // document began before the chunk).
    const int sl = docs.start(bh * NC + c, C - 1);
    const float gl = gam[r0 + C - 1];
    for (int t = threadIdx.x; t < C; t += blockDim.x) ek[t] = t >= sl ? expf(gl - gam[r0 + t]) : 0.f;
    __syncthreads();
    const float el = sl < 0 ? expf(gl) : 0.f;
    for (int e = threadIdx.x; e < Dk * nc; e += blockDim.x) {
      const int i = e / nc, jj = e - i * nc;
      float acc = 0.f;
      for (int t = 0; t < C; ++t) acc += ek[t] * kc[t * Dk + i] * dl[t * kCols + jj];
      S[i * kCols + jj] = el * S[i * kCols + jj] + acc;
    }
    __syncthreads();
  }
}

// kStage as in the forward: the chunk's p, dout columns, qn, kn and w rows in shared memory.
template <bool kStage>
__global__ void gdn_state_bwd_kernel(float* dsend, float* ddelta, const float* dout, const float* p, const float* w,
                                     const float* qn, const float* kn, const float* gam, int NC, int C, int Dk, int Dv,
                                     GdnDocs docs) {
  extern __shared__ float sh[];
  float *dS = sh, *dd = dS + Dk * kCols, *ek = dd + C * kCols, *eq = ek + C, *ps = eq + C, *dos = ps + C * C,
        *qs = dos + C * kCols, *ks = qs + C * Dk, *ws = ks + C * Dk;
  const int64_t bh = blockIdx.x, Tp = int64_t(NC) * C;
  const int j0 = blockIdx.y * kCols, nc = Dv - j0 < kCols ? Dv - j0 : kCols;
  for (int e = threadIdx.x; e < Dk * kCols; e += blockDim.x) dS[e] = 0.f;
  __syncthreads();
  for (int c = NC - 1; c >= 0; --c) {
    const int64_t r0 = bh * Tp + int64_t(c) * C;
    const float* pp = p + (bh * NC + c) * int64_t(C) * C;
    // dout's columns j0 .. j0 + nc of the chunk's rows: dcol(t, jj); staged with row stride kCols.
    const float *qc = qn + r0 * Dk, *kc = kn + r0 * Dk, *wc = w + r0 * Dk, *dcol = dout + r0 * Dv + j0;
    int64_t dld = Dv;
    if (kStage) {
      stage_rows(ps, pp, 0, C, C);
      stage_rows(qs, qn, r0, C, Dk);
      stage_rows(ks, kn, r0, C, Dk);
      stage_rows(ws, w, r0, C, Dk);
      for (int e = threadIdx.x; e < C * nc; e += blockDim.x) {
        const int t = e / nc, jj = e - t * nc;
        dos[t * kCols + jj] = dout[(r0 + t) * Dv + j0 + jj];
      }
      pp = ps, qc = qs, kc = ks, wc = ws, dcol = dos, dld = kCols;
    }
    float* ds = dsend + (bh * NC + c) * Dk * Dv;
    for (int e = threadIdx.x; e < Dk * nc; e += blockDim.x) {
      const int i = e / nc, jj = e - i * nc;
      ds[int64_t(i) * Dv + j0 + jj] = dS[i * kCols + jj];
    }
    const int64_t n = bh * NC + c;
    const int sl = docs.start(n, C - 1);
    const float gl = gam[r0 + C - 1];
    for (int t = threadIdx.x; t < C; t += blockDim.x) {
      ek[t] = t >= sl ? expf(gl - gam[r0 + t]) : 0.f;
      eq[t] = docs.start(n, t) < 0 ? expf(gam[r0 + t]) : 0.f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C * nc; e += blockDim.x) {
      const int t = e / nc, jj = e - t * nc;
      float a1 = 0.f, a2 = 0.f;
      for (int s = 0; s < C; ++s) a1 += pp[s * C + t] * dcol[s * dld + jj];
      const float* kr = kc + t * Dk;
      for (int i = 0; i < Dk; ++i) a2 += kr[i] * dS[i * kCols + jj];
      const float d = a1 + ek[t] * a2;
      dd[t * kCols + jj] = d;
      ddelta[(r0 + t) * Dv + j0 + jj] = d;
    }
    __syncthreads();
    const float el = sl < 0 ? expf(gl) : 0.f;
    for (int e = threadIdx.x; e < Dk * nc; e += blockDim.x) {
      const int i = e / nc, jj = e - i * nc;
      float a1 = 0.f, a2 = 0.f;
      for (int t = 0; t < C; ++t) {
        a1 += eq[t] * qc[t * Dk + i] * dcol[t * dld + jj];
        a2 += wc[t * Dk + i] * dd[t * kCols + jj];
      }
      dS[i * kCols + jj] = el * dS[i * kCols + jj] + a1 - a2;
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------- backward by chunk

__global__ void gdn_tri_bwd_kernel(float* dkk, float* dbf, float* dgam, const float* dtb, const float* dtk,
                                   const float* kk, const float* bf, const float* gam, int C, GdnDocs docs) {
  extern __shared__ float sh[];
  float *m = sh, *tm = m + C * C, *gm = tm + C * C, *z = gm + C * C, *tt = z + C * C, *b = tt + C * C, *g = b + C,
        *ab = g + C, *ag = ab + C;
  int* st = reinterpret_cast<int*>(ag + C);
  const int64_t n = blockIdx.x, base = n * C * C;
  load_chunk_vectors(b, g, st, bf, gam, docs, n, C);
  chunk_m_and_t(m, tm, kk + base, b, g, st, C);
  // T^T, so that dM's products below read T's rows with consecutive threads on consecutive
  // columns: read in place, T[j][a] over 32 consecutive j fell in one shared-memory bank (a 32-way
  // conflict at every step; 0.82 ms a call at the 2B shape, T 4096, on an H200).
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int a = e / C, j = e - a * C;
    tt[e] = tm[j * C + a];
  }
  // exp(gam_s) where the carried state reaches row s (tk's factor), and exp(gam_t - gam_s) for
  // s < t in t's document (M's), else 0.
  auto reach = [&](int s) { return st[s] < 0 ? expf(g[s]) : 0.f; };
  auto decay = [&](int t, int s) { return s < t && s >= st[t] ? expf(g[t] - g[s]) : 0.f; };
  // Through tb and tk: the columns' terms, and G (T's gradient below the diagonal).
  for (int s = threadIdx.x; s < C; s += blockDim.x) {
    const float es = reach(s);
    float sb = 0.f, sg = 0.f;
    for (int i = s; i < C; ++i) {
      const float x = tm[i * C + s];
      sb += (dtb[base + i * C + s] + dtk[base + i * C + s] * es) * x;
      sg += dtk[base + i * C + s] * x * b[s] * es;
    }
    ab[s] = sb;
    ag[s] = sg;
  }
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int i = e / C, s = e - i * C;
    gm[e] = s < i ? dtb[base + e] * b[s] + dtk[base + e] * b[s] * reach(s) : 0.f;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {  // Z = T^T G
    const int i = e / C, j = e - i * C;
    float acc = 0.f;
    for (int a = 0; a < C; ++a) acc += tm[a * C + i] * gm[a * C + j];
    z[e] = acc;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {  // dM = -Z T^T below the diagonal, over G
    const int i = e / C, j = e - i * C;
    float acc = 0.f;
    if (j < i)
      for (int a = 0; a < C; ++a) acc += z[i * C + a] * tt[a * C + j];
    gm[e] = -acc;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float sb = 0.f, sr = 0.f, cr = 0.f;
    for (int s = 0; s < i; ++s) {
      const float e = decay(i, s);
      sb += gm[i * C + s] * e * kk[base + i * C + s];
      sr += gm[i * C + s] * m[i * C + s];
    }
    for (int t = i + 1; t < C; ++t) cr += gm[t * C + i] * m[t * C + i];
    dbf[n * C + i] = ab[i] + sb;
    dgam[n * C + i] = (ag[i] + sr) - cr;
  }
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int i = e / C, s = e - i * C;
    const float h1 = s < i ? gm[i * C + s] * b[i] * decay(i, s) : 0.f;
    const float h2 = i < s ? gm[s * C + i] * b[s] * decay(s, i) : 0.f;
    dkk[base + e] = h1 + h2;
  }
}

__global__ void gdn_decay_mask_bwd_kernel(float* dp, float* dgam, const float* p, const float* gam, int C,
                                          GdnDocs docs) {
  extern __shared__ float r[];
  int* st = reinterpret_cast<int*>(r + C * C);
  const int64_t n = blockIdx.x, base = n * C * C;
  const float* g = gam + n * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) st[i] = docs.start(n, i);
  __syncthreads();
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int t = e / C, s = e - t * C;
    const float d = dp[base + e];
    const bool seen = s <= t && s >= st[t];
    r[e] = seen ? d * p[base + e] : 0.f;
    dp[base + e] = seen ? d * expf(g[t] - g[s]) : 0.f;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < C; t += blockDim.x) {
    float rows = 0.f, cols = 0.f;
    for (int s = 0; s < C; ++s) rows += r[t * C + s];
    for (int i = 0; i < C; ++i) cols += r[i * C + t];
    dgam[n * C + t] += rows - cols;
  }
}

__global__ void gdn_rows_bwd_kernel(float* dq, float* dk, float* dgam, const float* dqg, const float* dkt,
                                    const float* qn, const float* kn, const float* gam, const float* states,
                                    const float* dsend, int C, int Dk, int64_t state_elems, GdnDocs docs) {
  extern __shared__ float sh[];
  float *dotq = sh, *dotk = dotq + C;
  const int64_t n = blockIdx.x, r0 = n * C;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float gl = gam[r0 + C - 1];
  const int sl = docs.start(n, C - 1);
  // exp(gam_t) where the carried state reaches row t; exp(gam_last - gam_t) for t in the last row's document.
  auto eq_of = [&](int t) { return docs.start(n, t) < 0 ? expf(gam[r0 + t]) : 0.f; };
  auto ek_of = [&](int t) { return t >= sl ? expf(gl - gam[r0 + t]) : 0.f; };
  for (int t = warp; t < C; t += warps) {
    const int64_t o = (r0 + t) * Dk;
    const float eq = eq_of(t), ek = ek_of(t);
    float aq = 0.f, ak = 0.f;
    for (int i = lane; i < Dk; i += 32) {
      aq += dqg[o + i] * qn[o + i];
      ak += dkt[o + i] * kn[o + i];
      dq[o + i] += eq * dqg[o + i];
      dk[o + i] += ek * dkt[o + i];
    }
    aq = warp_sum(aq);
    ak = warp_sum(ak);
    if (lane == 0) dotq[t] = aq, dotk[t] = ak;
  }
  float f = 0.f;
  for (int64_t e = threadIdx.x; e < state_elems; e += blockDim.x) f += dsend[n * state_elems + e] * states[n * state_elems + e];
  f = block_sum(f);  // synchronises: dotq, dotk are complete
  if (threadIdx.x == 0) {
    float rsum = 0.f;
    for (int t = 0; t < C; ++t) {
      const float eq = eq_of(t), ek = ek_of(t);
      dgam[r0 + t] += eq * dotq[t] - ek * dotk[t];
      rsum += ek * dotk[t];
    }
    dgam[r0 + C - 1] += rsum + (sl < 0 ? expf(gl) : 0.f) * f;
  }
}

// ---------------------------------------------------------------- finish

// One warp a (b, t, key head): the value heads' sum of dqn (or dkn), through scale and the l2norm.
template <class T>
__global__ void gdn_finish_qk_kernel(T* dx, const float* dsum, const T* x, int64_t rows, int64_t Tlen, int64_t Tp,
                                     int Hk, int Hv, int Dk, View4 xs, View4 dxs, float mul) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, G = Hv / Hk;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const int64_t bt = row / Hk, b = bt / Tlen, t = bt - b * Tlen;
    const int hk = int(row - bt * Hk);
    const T* xr = x + b * xs.s0 + t * xs.s1 + hk * xs.s2;
    T* dr = dx + b * dxs.s0 + t * dxs.s1 + hk * dxs.s2;
    auto dn = [&](int i) {
      float s = 0.f;
      for (int h = hk * G; h < (hk + 1) * G; ++h) s += dsum[((b * Hv + h) * Tp + t) * Dk + i];
      return s;
    };
    float ss = 0.f;
    for (int i = lane; i < Dk; i += 32) ss += load_t(xr, i) * load_t(xr, i);
    ss = warp_sum(ss);
    const float r = 1.f / sqrtf(ss + 1e-6f);
    float dot = 0.f;
    for (int i = lane; i < Dk; i += 32) dot += load_t(xr, i) * r * dn(i) * mul;
    dot = warp_sum(dot);
    for (int i = lane; i < Dk; i += 32) store_t(dr, i, r * (dn(i) * mul - load_t(xr, i) * r * dot));
  }
}

template <class T>
__global__ void gdn_finish_v_kernel(T* dv, T* dbeta, const float* dvf, const float* dbf, int64_t total, int64_t Tlen,
                                    int64_t Tp, int Hv, int Dv, View4 dvs) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / Dv;  // (b, t, h)
    const int j = int(e - r * Dv);
    const int64_t bt = r / Hv, b = bt / Tlen, t = bt - b * Tlen;
    const int h = int(r - bt * Hv);
    const int64_t row = (b * Hv + h) * Tp + t;
    store_t(dv + b * dvs.s0 + t * dvs.s1 + h * dvs.s2, j, dvf[row * Dv + j]);
    if (j == 0) store_t(dbeta, r, dbf[row]);
  }
}

__global__ void gdn_finish_g_kernel(float* dg, const float* dgam, int64_t chunks, int64_t Tlen, int64_t Tp, int Hv, int C,
                                    GdnDocs docs) {
  const int64_t nc = Tp / C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / nc, c = i - bh * nc, b = bh / Hv, h = bh - b * Hv;
    float acc = 0.f;
    for (int j = C - 1; j >= 0; --j) {
      const int64_t t = c * C + j;
      acc += dgam[bh * Tp + t];
      if (t < Tlen) dg[(b * Tlen + t) * Hv + h] = acc;
      if (docs.start(i, j) == j) acc = 0.f;  // gam restarted here: earlier rows are another document's
    }
  }
}

// ---------------------------------------------------------------- decay

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float softplus_grad_f(float x) { return x > 20.f ? 1.f : 1.f / (1.f + expf(-x)); }

template <class T, class P, class Q>
__global__ void gdn_decay_fwd_kernel(float* g, const T* a, const P* a_log, const Q* dt, int64_t N, int H, int64_t as) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H;
    const int h = int(e - r * H);
    const float x = load_t(a, r * as + h) + load_t(dt, h);
    g[e] = -expf(load_t(a_log, h)) * softplus_f(x);
  }
}

template <class T, class P, class Q>
__global__ void gdn_decay_bwd_kernel(float* da, float* dalog, const float* dg, const T* a, const P* a_log, const Q* dt,
                                     int64_t N, int H, int64_t as) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < N * H; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H;
    const int h = int(e - r * H);
    const float x = load_t(a, r * as + h) + load_t(dt, h);
    const float ex = expf(load_t(a_log, h)), d = dg[e];
    da[e] = -d * ex * softplus_grad_f(x);
    dalog[e] = -d * ex * softplus_f(x);
  }
}

unsigned rows_grid(int64_t rows, int warps_per_block) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((rows + warps_per_block - 1) / warps_per_block, 65535)));
}

// Chunk size of a [N, C, C] tensor, checked.
int chunk_of(const Tensor& m, const char* op) {
  LT_CHECK(m.dim() == 3 && m.size(1) == m.size(2) && m.size(1) >= 1 && m.size(1) <= 64,
           std::string(op) + ": chunk matrices must be [N, C, C] with C <= 64", "the kernels keep them in shared memory", "");
  return int(m.size(1));
}

// doc_pos checked for the kernels: undefined, or a contiguous i32 [B, T] on the GPU.
void check_docs(const Tensor& doc_pos, const char* op) {
  LT_CHECK(!doc_pos.defined() || (doc_pos.dtype() == DType::I32 && doc_pos.dim() == 2 && doc_pos.is_contiguous()),
           std::string(op) + ": doc_pos must be a contiguous i32 [B, T] tensor", "the kernels read it densely", "");
}

}  // namespace

void CudaBackend::gdn_prepare(const Tensor& qn, const Tensor& kn, const Tensor& vf, const Tensor& bf, const Tensor& gam,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& g,
                              const Tensor& doc_pos, int64_t chunk, float scale) {
  check_docs(doc_pos, "gdn_prepare");
  for (auto [t, n] : {std::pair{&qn, "qn"}, {&kn, "kn"}, {&vf, "vf"}, {&bf, "bf"}, {&gam, "gam"}, {&g, "g"}})
    check_acc(*t, "gdn_prepare", n);
  LT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.strides()[3] == 1 && k.strides()[3] == 1 &&
               v.strides()[3] == 1 && beta.is_contiguous(),
           "gdn_prepare: q, k, v must be [B, T, H, D] views with unit stride on D, beta contiguous",
           "the kernel reads rows of D", "");
  const int64_t B = q.size(0), T = q.size(1), Tp = qn.size(1), BH = qn.size(0);
  const int Hk = int(q.size(2)), Dk = int(q.size(3)), Hv = int(v.size(2)), Dv = int(v.size(3));
  const int64_t rows = BH * Tp;
  dispatch_float(q.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    gdn_prepare_kernel<T_><<<rows_grid(rows, kThreads / 32), kThreads, 0, current_stream()>>>(
        qn.data<float>(), kn.data<float>(), vf.data<float>(), bf.data<float>(), q.data<T_>(), k.data<T_>(),
        v.data<T_>(), beta.data<T_>(), rows, T, Tp, Hk, Hv, Dk, Dv, view4(q), view4(k), view4(v), scale);
    LT_CUDA_LAUNCH_CHECK("gdn_prepare_kernel");
  });
  const int64_t chunks = BH * (Tp / chunk);
  gdn_cumsum_kernel<<<grid_for(chunks, kThreads), kThreads, 0, current_stream()>>>(
      gam.data<float>(), g.data<float>(), chunks, T, Tp, Hv, int(chunk), gdn_docs(doc_pos, BH, Tp, chunk));
  LT_CUDA_LAUNCH_CHECK("gdn_cumsum_kernel");
  (void)B;
}

void CudaBackend::gdn_tri_fwd(const Tensor& t, const Tensor& tb, const Tensor& tk, const Tensor& kk, const Tensor& bf,
                              const Tensor& gam, const Tensor& doc_pos) {
  const int C = chunk_of(kk, "gdn_tri_fwd");
  check_docs(doc_pos, "gdn_tri_fwd");
  for (auto [x, n] : {std::pair{&tb, "tb"}, {&tk, "tk"}, {&kk, "kk"}, {&bf, "bf"}, {&gam, "gam"}}) check_acc(*x, "gdn_tri_fwd", n);
  const int64_t N = kk.size(0);
  if (N == 0) return;
  const size_t smem = size_t(2 * C * C + 3 * C) * sizeof(float);  // m, tm, b, g and the document starts
  allow_smem(gdn_tri_fwd_kernel, smem);
  gdn_tri_fwd_kernel<<<unsigned(N), kThreads, smem, current_stream()>>>(
      t.defined() ? t.data<float>() : nullptr, tb.data<float>(), tk.data<float>(), kk.data<float>(), bf.data<float>(),
      gam.data<float>(), C, gdn_docs(doc_pos, bf.size(0), bf.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_tri_fwd_kernel");
}

void CudaBackend::gdn_state_fwd(const Tensor& states, const Tensor& delta, const Tensor& u, const Tensor& w,
                                const Tensor& kn, const Tensor& gam, const Tensor& doc_pos) {
  check_docs(doc_pos, "gdn_state_fwd");
  for (auto [x, n] : {std::pair{&states, "states"}, {&delta, "delta"}, {&u, "u"}, {&w, "w"}, {&kn, "kn"}, {&gam, "gam"}})
    check_acc(*x, "gdn_state_fwd", n);
  const int64_t BH = states.size(0);
  const int NC = int(states.size(1)), Dk = int(states.size(2)), Dv = int(states.size(3));
  const int C = int(gam.size(1) / NC);
  if (BH == 0) return;
  if (gdn_state_fwd_tiled(states.data<float>(), delta.data<float>(), u.data<float>(), w.data<float>(),
                          kn.data<float>(), gam.data<float>(), BH, NC, C, Dk, Dv, gdn_docs(doc_pos, BH, gam.size(1), C),
                          current_stream()))
    return;
  const size_t base = size_t(Dk * kCols + C * kCols + C) * sizeof(float);
  const size_t staged = base + size_t(2 * C * Dk) * sizeof(float);
  const bool stage = staged <= kStageSmem && stage_rows_on();
  auto kernel = stage ? gdn_state_fwd_kernel<true> : gdn_state_fwd_kernel<false>;
  const size_t smem = stage ? staged : base;
  allow_smem(kernel, smem);
  const dim3 grid(unsigned(BH), unsigned((Dv + kCols - 1) / kCols));
  kernel<<<grid, kThreads, smem, current_stream()>>>(states.data<float>(), delta.data<float>(), u.data<float>(),
                                                     w.data<float>(), kn.data<float>(), gam.data<float>(), NC, C, Dk,
                                                     Dv, gdn_docs(doc_pos, BH, gam.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_state_fwd_kernel");
}

void CudaBackend::gdn_decay_mask(const Tensor& p, const Tensor& gam, const Tensor& doc_pos) {
  const int C = chunk_of(p, "gdn_decay_mask");
  check_docs(doc_pos, "gdn_decay_mask");
  check_acc(p, "gdn_decay_mask", "p");
  check_acc(gam, "gdn_decay_mask", "gam");
  const int64_t total = p.numel();
  if (total == 0) return;
  gdn_decay_mask_kernel<<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
      p.data<float>(), gam.data<float>(), total, C, gdn_docs(doc_pos, gam.size(0), gam.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_decay_mask_kernel");
}

namespace {

template <class T>
__global__ void gdn_output_kernel(T* out, const float* o, const float* y, const float* gam, int64_t total, int64_t Tlen,
                                  int64_t Tp, int Hv, int Dv, GdnDocs docs) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / Dv;  // (b, t, h)
    const int j = int(e - r * Dv);
    const int64_t bt = r / Hv, b = bt / Tlen, t = bt - b * Tlen;
    const int h = int(r - bt * Hv);
    const int64_t row = (b * Hv + h) * Tp + t;
    const float eq = docs.start_of_row(b * Hv + h, t) < 0 ? expf(gam[row]) : 0.f;
    store_t(out, e, o[row * Dv + j] + eq * y[row * Dv + j]);
  }
}

template <class T>
__global__ void gdn_pack_kernel(float* dst, const T* src, int64_t total, int64_t Tlen, int64_t Tp, int H, int D) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / D;  // (bh, t)
    const int j = int(e - row * D);
    const int64_t bh = row / Tp, t = row - bh * Tp, b = bh / H, h = bh - b * H;
    dst[e] = t < Tlen ? load_t(src, ((b * Tlen + t) * H + h) * D + j) : 0.f;
  }
}

}  // namespace

void CudaBackend::gdn_output(const Tensor& out, const Tensor& o, const Tensor& y, const Tensor& gam,
                             const Tensor& doc_pos, int64_t chunk) {
  check_docs(doc_pos, "gdn_output");
  check_acc(o, "gdn_output", "o");
  check_acc(y, "gdn_output", "y");
  check_acc(gam, "gdn_output", "gam");
  LT_CHECK(out.dim() == 4 && out.is_contiguous(), "gdn_output: out must be a contiguous [B, T, Hv, Dv] tensor",
           "the kernel writes it densely", "");
  const int64_t total = out.numel();
  if (total == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gdn_output_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        out.data<T>(), o.data<float>(), y.data<float>(), gam.data<float>(), total, out.size(1), gam.size(1),
        int(out.size(2)), int(out.size(3)), gdn_docs(doc_pos, gam.size(0), gam.size(1), chunk));
    LT_CUDA_LAUNCH_CHECK("gdn_output_kernel");
  });
}

void CudaBackend::gdn_pack(const Tensor& dst, const Tensor& src) {
  check_acc(dst, "gdn_pack", "dst");
  LT_CHECK(src.dim() == 4 && src.is_contiguous(), "gdn_pack: src must be a contiguous [B, T, H, D] tensor",
           "the kernel reads it densely", "");
  const int64_t total = dst.numel();
  if (total == 0) return;
  dispatch_float(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gdn_pack_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        dst.data<float>(), src.data<T>(), total, src.size(1), dst.size(1), int(src.size(2)), int(src.size(3)));
    LT_CUDA_LAUNCH_CHECK("gdn_pack_kernel");
  });
}

void CudaBackend::gdn_state_bwd(const Tensor& dsend, const Tensor& ddelta, const Tensor& dout, const Tensor& p,
                                const Tensor& w, const Tensor& qn, const Tensor& kn, const Tensor& gam,
                                const Tensor& doc_pos) {
  check_docs(doc_pos, "gdn_state_bwd");
  for (auto [x, n] : {std::pair{&dsend, "dsend"}, {&ddelta, "ddelta"}, {&dout, "dout"}, {&p, "p"}, {&w, "w"},
                      {&qn, "qn"}, {&kn, "kn"}, {&gam, "gam"}})
    check_acc(*x, "gdn_state_bwd", n);
  const int64_t BH = dsend.size(0);
  const int NC = int(dsend.size(1)), Dk = int(dsend.size(2)), Dv = int(dsend.size(3));
  const int C = int(gam.size(1) / NC);
  if (BH == 0) return;
  if (gdn_state_bwd_tiled(dsend.data<float>(), ddelta.data<float>(), dout.data<float>(), p.data<float>(),
                          w.data<float>(), qn.data<float>(), kn.data<float>(), gam.data<float>(), BH, NC, C, Dk, Dv,
                          gdn_docs(doc_pos, BH, gam.size(1), C), current_stream()))
    return;
  const size_t base = size_t(Dk * kCols + C * kCols + 2 * C) * sizeof(float);
  const size_t staged = base + size_t(C * C + C * kCols + 3 * C * Dk) * sizeof(float);
  const bool stage = staged <= kStageSmem && stage_rows_on();
  auto kernel = stage ? gdn_state_bwd_kernel<true> : gdn_state_bwd_kernel<false>;
  const size_t smem = stage ? staged : base;
  allow_smem(kernel, smem);
  const dim3 grid(unsigned(BH), unsigned((Dv + kCols - 1) / kCols));
  kernel<<<grid, kThreads, smem, current_stream()>>>(dsend.data<float>(), ddelta.data<float>(), dout.data<float>(),
                                                     p.data<float>(), w.data<float>(), qn.data<float>(),
                                                     kn.data<float>(), gam.data<float>(), NC, C, Dk, Dv,
                                                     gdn_docs(doc_pos, BH, gam.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_state_bwd_kernel");
}

void CudaBackend::gdn_tri_bwd(const Tensor& dkk, const Tensor& dbf, const Tensor& dgam, const Tensor& dtb,
                              const Tensor& dtk, const Tensor& kk, const Tensor& bf, const Tensor& gam,
                              const Tensor& doc_pos) {
  const int C = chunk_of(kk, "gdn_tri_bwd");
  check_docs(doc_pos, "gdn_tri_bwd");
  for (auto [x, n] : {std::pair{&dkk, "dkk"}, {&dbf, "dbf"}, {&dgam, "dgam"}, {&dtb, "dtb"}, {&dtk, "dtk"},
                      {&kk, "kk"}, {&bf, "bf"}, {&gam, "gam"}})
    check_acc(*x, "gdn_tri_bwd", n);
  const int64_t N = kk.size(0);
  if (N == 0) return;
  const size_t smem = size_t(5 * C * C + 5 * C) * sizeof(float);  // m, tm, gm, z, tt, b, g, ab, ag, document starts
  allow_smem(gdn_tri_bwd_kernel, smem);
  gdn_tri_bwd_kernel<<<unsigned(N), kThreads, smem, current_stream()>>>(
      dkk.data<float>(), dbf.data<float>(), dgam.data<float>(), dtb.data<float>(), dtk.data<float>(), kk.data<float>(),
      bf.data<float>(), gam.data<float>(), C, gdn_docs(doc_pos, bf.size(0), bf.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_tri_bwd_kernel");
}

void CudaBackend::gdn_decay_mask_bwd(const Tensor& dp, const Tensor& dgam, const Tensor& p, const Tensor& gam,
                                     const Tensor& doc_pos) {
  const int C = chunk_of(p, "gdn_decay_mask_bwd");
  check_docs(doc_pos, "gdn_decay_mask_bwd");
  for (auto [x, n] : {std::pair{&dp, "dp"}, {&dgam, "dgam"}, {&p, "p"}, {&gam, "gam"}}) check_acc(*x, "gdn_decay_mask_bwd", n);
  const int64_t N = p.size(0);
  if (N == 0) return;
  const size_t smem = size_t(C * C + C) * sizeof(float);  // R and the document starts
  gdn_decay_mask_bwd_kernel<<<unsigned(N), kThreads, smem, current_stream()>>>(
      dp.data<float>(), dgam.data<float>(), p.data<float>(), gam.data<float>(), C,
      gdn_docs(doc_pos, gam.size(0), gam.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_decay_mask_bwd_kernel");
}

void CudaBackend::gdn_rows_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dgam, const Tensor& dqg,
                               const Tensor& dkt, const Tensor& qn, const Tensor& kn, const Tensor& gam,
                               const Tensor& states, const Tensor& dsend, const Tensor& doc_pos) {
  check_docs(doc_pos, "gdn_rows_bwd");
  for (auto [x, n] : {std::pair{&dq, "dq"}, {&dk, "dk"}, {&dgam, "dgam"}, {&dqg, "dqg"}, {&dkt, "dkt"}, {&qn, "qn"},
                      {&kn, "kn"}, {&gam, "gam"}, {&states, "states"}, {&dsend, "dsend"}})
    check_acc(*x, "gdn_rows_bwd", n);
  const int64_t BH = states.size(0), NC = states.size(1), Dk = states.size(2), Dv = states.size(3);
  const int C = int(gam.size(1) / NC);
  const int64_t N = BH * NC;
  if (N == 0) return;
  gdn_rows_bwd_kernel<<<unsigned(N), kThreads, size_t(2 * C) * sizeof(float), current_stream()>>>(
      dq.data<float>(), dk.data<float>(), dgam.data<float>(), dqg.data<float>(), dkt.data<float>(), qn.data<float>(),
      kn.data<float>(), gam.data<float>(), states.data<float>(), dsend.data<float>(), C, int(Dk), Dk * Dv,
      gdn_docs(doc_pos, BH, gam.size(1), C));
  LT_CUDA_LAUNCH_CHECK("gdn_rows_bwd_kernel");
}

void CudaBackend::gdn_finish(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbeta,
                             const Tensor& dg, const Tensor& dqn, const Tensor& dkn, const Tensor& dvf,
                             const Tensor& dbf, const Tensor& dgam, const Tensor& q, const Tensor& k,
                             const Tensor& doc_pos, int64_t chunk, float scale) {
  check_docs(doc_pos, "gdn_finish");
  for (auto [x, n] : {std::pair{&dqn, "dqn"}, {&dkn, "dkn"}, {&dvf, "dvf"}, {&dbf, "dbf"}, {&dgam, "dgam"}, {&dg, "dg"}})
    check_acc(*x, "gdn_finish", n);
  LT_CHECK(dq.strides()[3] == 1 && dk.strides()[3] == 1 && dv.strides()[3] == 1 && q.strides()[3] == 1 &&
               k.strides()[3] == 1 && dbeta.is_contiguous(),
           "gdn_finish: dq, dk, dv, q, k must be [B, T, H, D] views with unit stride on D, dbeta contiguous",
           "the kernels write rows of D", "");
  const int64_t B = q.size(0), T = q.size(1), Tp = dgam.size(1), BH = dgam.size(0);
  const int Hk = int(q.size(2)), Dk = int(q.size(3)), Hv = int(dv.size(2)), Dv = int(dv.size(3));
  dispatch_float(q.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    const int64_t rows = B * T * Hk;
    if (rows > 0) {
      gdn_finish_qk_kernel<T_><<<rows_grid(rows, kThreads / 32), kThreads, 0, current_stream()>>>(
          dq.data<T_>(), dqn.data<float>(), q.data<T_>(), rows, T, Tp, Hk, Hv, Dk, view4(q), view4(dq), scale);
      LT_CUDA_LAUNCH_CHECK("gdn_finish_qk_kernel");
      gdn_finish_qk_kernel<T_><<<rows_grid(rows, kThreads / 32), kThreads, 0, current_stream()>>>(
          dk.data<T_>(), dkn.data<float>(), k.data<T_>(), rows, T, Tp, Hk, Hv, Dk, view4(k), view4(dk), 1.0f);
      LT_CUDA_LAUNCH_CHECK("gdn_finish_qk_kernel");
    }
    const int64_t total = B * T * Hv * int64_t(Dv);
    if (total > 0) {
      gdn_finish_v_kernel<T_><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
          dv.data<T_>(), dbeta.data<T_>(), dvf.data<float>(), dbf.data<float>(), total, T, Tp, Hv, Dv, view4(dv));
      LT_CUDA_LAUNCH_CHECK("gdn_finish_v_kernel");
    }
  });
  const int64_t chunks = BH * (Tp / chunk);
  if (chunks > 0) {
    gdn_finish_g_kernel<<<grid_for(chunks, kThreads), kThreads, 0, current_stream()>>>(
        dg.data<float>(), dgam.data<float>(), chunks, T, Tp, Hv, int(chunk), gdn_docs(doc_pos, BH, Tp, chunk));
    LT_CUDA_LAUNCH_CHECK("gdn_finish_g_kernel");
  }
}

void CudaBackend::gdn_decay_fwd(const Tensor& g, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias) {
  check_acc(g, "gdn_decay_fwd", "g");
  LT_CHECK(a.dim() == 2 && a.strides()[1] == 1 && a_log.is_contiguous() && dt_bias.is_contiguous(),
           "gdn_decay_fwd: a must be [N, H] with unit stride on H, a_log and dt_bias contiguous",
           "the kernel reads rows of a", "");
  const int64_t N = a.size(0), H = a.size(1);
  if (N * H == 0) return;
  dispatch_float(a.dtype(), [&](auto ta) {
    dispatch_float(a_log.dtype(), [&](auto tl) {
      dispatch_float(dt_bias.dtype(), [&](auto td) {
        using TA = decltype(ta);
        using TL = decltype(tl);
        using TD = decltype(td);
        gdn_decay_fwd_kernel<TA, TL, TD><<<grid_for(N * H, kThreads), kThreads, 0, current_stream()>>>(
            g.data<float>(), a.data<TA>(), a_log.data<TL>(), dt_bias.data<TD>(), N, int(H), a.strides()[0]);
        LT_CUDA_LAUNCH_CHECK("gdn_decay_fwd_kernel");
      });
    });
  });
}

void CudaBackend::gdn_decay_bwd(const Tensor& da, const Tensor& dalog, const Tensor& dg, const Tensor& a,
                                const Tensor& a_log, const Tensor& dt_bias) {
  for (auto [x, n] : {std::pair{&da, "da"}, {&dalog, "dalog"}, {&dg, "dg"}}) check_acc(*x, "gdn_decay_bwd", n);
  LT_CHECK(a.dim() == 2 && a.strides()[1] == 1 && a_log.is_contiguous() && dt_bias.is_contiguous(),
           "gdn_decay_bwd: a must be [N, H] with unit stride on H, a_log and dt_bias contiguous",
           "the kernel reads rows of a", "");
  const int64_t N = a.size(0), H = a.size(1);
  if (N * H == 0) return;
  dispatch_float(a.dtype(), [&](auto ta) {
    dispatch_float(a_log.dtype(), [&](auto tl) {
      dispatch_float(dt_bias.dtype(), [&](auto td) {
        using TA = decltype(ta);
        using TL = decltype(tl);
        using TD = decltype(td);
        gdn_decay_bwd_kernel<TA, TL, TD><<<grid_for(N * H, kThreads), kThreads, 0, current_stream()>>>(
            da.data<float>(), dalog.data<float>(), dg.data<float>(), a.data<TA>(), a_log.data<TL>(),
            dt_bias.data<TD>(), N, int(H), a.strides()[0]);
        LT_CUDA_LAUNCH_CHECK("gdn_decay_bwd_kernel");
      });
    });
  });
}

}  // namespace lt
