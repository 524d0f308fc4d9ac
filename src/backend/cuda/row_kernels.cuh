// Helpers for the row-wise kernels (norms, softmax, cross-entropy, embeddings): packed
// 16-byte loads/stores with f32 conversion, alignment tests, and an online (max, sum-exp)
// state that merges across threads, warps and blocks in a fixed order (deterministic).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"

namespace lt::cuda::rk {

// P elements of T moved as one aligned access (16 bytes when P = 16 / sizeof(T)).
template <class T, int P> struct alignas(sizeof(T) * P) Pack {
  T v[P];
};
template <class T> constexpr int kVec = int(16 / sizeof(T));

template <class T, int P> __device__ __forceinline__ void load_f32(const T* p, float (&out)[P]) {
  const Pack<T, P> pk = *reinterpret_cast<const Pack<T, P>*>(p);
#pragma unroll
  for (int k = 0; k < P; ++k) out[k] = to_f32(pk.v[k]);
}
template <class T, int P> __device__ __forceinline__ void store_f32(T* p, const float (&in)[P]) {
  Pack<T, P> pk;
#pragma unroll
  for (int k = 0; k < P; ++k) pk.v[k] = from_f32<T>(in[k]);
  *reinterpret_cast<Pack<T, P>*>(p) = pk;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// exp for the accumulation: exact expf for f32 data (tight tolerance), the fast
// hardware approximation for 16-bit data where the storage rounding dominates anyway.
template <class T> __device__ __forceinline__ float exp_acc(float x) { return __expf(x); }
template <> __device__ __forceinline__ float exp_acc<float>(float x) { return expf(x); }

// Running max m and sum s of exp(x - m). m = -inf means "nothing seen" (s = 0); the merge
// never evaluates exp(-inf - -inf), so fully -inf rows stay NaN-free.
template <class T> struct OnlineMax {
  float m = -INFINITY, s = 0.0f;
  __device__ __forceinline__ void merge(float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;  // both empty
    s = (m == -INFINITY ? 0.0f : s * exp_acc<T>(m - mn)) + (m2 == -INFINITY ? 0.0f : s2 * exp_acc<T>(m2 - mn));
    m = mn;
  }
  template <int P> __device__ __forceinline__ void add(const float (&v)[P]) {
    float pm = v[0];
#pragma unroll
    for (int k = 1; k < P; ++k) pm = fmaxf(pm, v[k]);
    if (pm == -INFINITY) return;
    if (pm > m) {
      s = (m == -INFINITY) ? 0.0f : s * exp_acc<T>(m - pm);
      m = pm;
    }
#pragma unroll
    for (int k = 0; k < P; ++k) s += exp_acc<T>(v[k] - m);
  }
  __device__ __forceinline__ void warp_reduce() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      merge(m2, s2);
    }
  }
  // Whole block (blockDim.x threads, a multiple of 32); every thread ends with the result.
  // The merge order over warps is fixed, so the result does not depend on timing.
  __device__ __forceinline__ void block_reduce() {
    __shared__ float sm[32], ss[32];
    warp_reduce();
    __syncthreads();  // sm/ss may still be read by a previous call
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    m = -INFINITY;
    s = 0.0f;
    for (int w = 0; w < nw; ++w) merge(sm[w], ss[w]);
  }
};

// Sum over a block of blockDim.x threads for two values at once (one pair of barriers).
__device__ __forceinline__ void block_sum2(float& a, float& b) {
  __shared__ float pa[32], pb[32];
  a = warp_sum(a);
  b = warp_sum(b);
  __syncthreads();  // pa/pb may still be read by a previous call
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { pa[warp] = a; pb[warp] = b; }
  __syncthreads();
  a = 0.0f;
  b = 0.0f;
  for (int w = 0; w < nw; ++w) { a += pa[w]; b += pb[w]; }
}

// A normalised row's input gradient in two passes over its packs, shared by norm.cu's LayerNorm
// and RMSNorm kernels and norm_heads.cu's per-head RMSNorm, so every dx is the same expression in
// the same order: g = dy * (w + w_off), xhat = (x - mu) * rs (mu = 0 for RMS).
// Pass 1 over the P columns at c: sg += g, sgx += g * xhat.
template <class T, int P>
__device__ __forceinline__ void dx_sums_pack(const T* __restrict__ xr, const T* __restrict__ dyr,
                                             const T* __restrict__ w, float w_off, int c, float mu, float rs,
                                             float& sg, float& sgx) {
  float xv[P], gv[P], wv[P];
  load_f32<T, P>(xr + c, xv);
  load_f32<T, P>(dyr + c, gv);
  load_f32<T, P>(w + c, wv);
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const float g = gv[k] * (wv[k] + w_off);
    sg += g;
    sgx += g * (xv[k] - mu) * rs;
  }
}

// Pass 2 over the P columns at c (mg = mean(g), mgx = mean(g * xhat)): dx stored; x and dy of
// those columns left in xv and gv (re-read: L1-hot from pass 1).
template <class T, int P, bool ADD>
__device__ __forceinline__ void dx_store_pack(T* __restrict__ dxr, const T* __restrict__ xr,
                                              const T* __restrict__ dyr, const T* __restrict__ dsr,
                                              const T* __restrict__ w, float w_off, int c, float mu, float rs,
                                              float mg, float mgx, float (&xv)[P], float (&gv)[P]) {
  float wv[P], sv[P], o[P];
  load_f32<T, P>(xr + c, xv);
  load_f32<T, P>(dyr + c, gv);
  load_f32<T, P>(w + c, wv);
  if (ADD) load_f32<T, P>(dsr + c, sv);
#pragma unroll
  for (int k = 0; k < P; ++k) {
    o[k] = rs * (gv[k] * (wv[k] + w_off) - mg - (xv[k] - mu) * rs * mgx);
    if (ADD) o[k] += sv[k];
  }
  store_f32<T, P>(dxr + c, o);
}

}  // namespace lt::cuda::rk
