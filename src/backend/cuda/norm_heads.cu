// Per-head RMSNorm of a packed projection (Qwen3's q_norm / k_norm over q | k | v), read in place.
// One warp per head row (a token's head of D columns) for the forward and for dx, with the lane
// layout, packed 16-byte accesses and expressions of norm.cu's RMSNorm row kernels, so each head
// gets the bits rmsnorm_fwd / rmsnorm_bwd give it as a row of its own; a warp per token copies the
// passthrough columns (v). The weights' gradients in parts: one thread a (part, column) summing
// its part's head rows in order, which the front-end adds. No atomics: the same bits every run.
#include <algorithm>
#include <initializer_list>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;
using namespace cuda::rk;

namespace {

constexpr int kThreads = 256;  // 8 warps a block

// Where the warp's item lies: a head row (n, h) of x, or (h < 0) row n's passthrough columns.
struct HeadItem {
  int64_t n;
  int h;
};
__device__ __forceinline__ HeadItem head_item(int64_t item, int64_t heads, int H) {
  if (item >= heads) return {item - heads, -1};
  const int64_t n = item / H;
  return {n, int(item - n * H)};
}

// Columns [c0, W) of a row from src to dst in packs of P (both aligned to P elements).
template <class T, int P>
__device__ __forceinline__ void copy_cols(T* __restrict__ dst, const T* __restrict__ src, int c0, int W, int lane) {
  for (int c = c0 + lane * P; c < W; c += 32 * P)
    *reinterpret_cast<Pack<T, P>*>(dst + c) = *reinterpret_cast<const Pack<T, P>*>(src + c);
}

// y = x * rstd * (w + w_off), rstd = 1 / sqrt(mean(x^2) + eps): norm_fwd_kernel's RMS row.
template <class T, int P>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_heads_fwd_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                             const T* __restrict__ wa, const T* __restrict__ wb, int64_t N, int ha, int H, int D, int W,
                             int64_t xs, float eps, float w_off) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t heads = N * H, items = heads + (W > H * D ? N : 0);
  for (int64_t it = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); it < items; it += int64_t(gridDim.x) * warps) {
    const HeadItem at = head_item(it, heads, H);
    if (at.h < 0) {
      copy_cols<T, P>(y + at.n * W, x + at.n * xs, H * D, W, lane);
      continue;
    }
    const T* xr = x + at.n * xs + int64_t(at.h) * D;
    const T* w = at.h < ha ? wa : wb;
    float s2 = 0.0f;
    for (int c = lane * P; c < D; c += 32 * P) {
      float v[P];
      load_f32<T, P>(xr + c, v);
#pragma unroll
      for (int k = 0; k < P; ++k) s2 += v[k] * v[k];
    }
    const float rs = 1.0f / sqrtf(warp_sum(s2) / float(D) + eps);
    T* yr = y + at.n * W + int64_t(at.h) * D;
    for (int c = lane * P; c < D; c += 32 * P) {
      float v[P], wv[P];
      load_f32<T, P>(xr + c, v);
      load_f32<T, P>(w + c, wv);
#pragma unroll
      for (int k = 0; k < P; ++k) v[k] = v[k] * rs * (wv[k] + w_off);
      store_f32<T, P>(yr + c, v);
    }
    if (lane == 0) rstd[it] = rs;
  }
}

// g = dy * (w + w_off), xhat = x * rstd: dx = rstd * (g - xhat * mean(g * xhat)), through the two
// passes norm.cu's RMSNorm backward takes (row_kernels.cuh: mean 0, no mean(g)).
template <class T, int P>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_heads_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                            const T* __restrict__ wa, const T* __restrict__ wb, const float* __restrict__ rstd,
                            int64_t N, int ha, int H, int D, int W, int64_t xs, float w_off) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t heads = N * H, items = heads + (W > H * D ? N : 0);
  for (int64_t it = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); it < items; it += int64_t(gridDim.x) * warps) {
    const HeadItem at = head_item(it, heads, H);
    if (at.h < 0) {
      copy_cols<T, P>(dx + at.n * W, dy + at.n * W, H * D, W, lane);
      continue;
    }
    const T* xr = x + at.n * xs + int64_t(at.h) * D;
    const T* dyr = dy + at.n * W + int64_t(at.h) * D;
    const T* w = at.h < ha ? wa : wb;
    const float rs = rstd[it];
    float sg = 0.0f, sgx = 0.0f;  // sg: LayerNorm's mean(g), unused here
    for (int c = lane * P; c < D; c += 32 * P) dx_sums_pack<T, P>(xr, dyr, w, w_off, c, 0.0f, rs, sg, sgx);
    const float mgx = warp_sum(sgx) / float(D);
    T* dxr = dx + at.n * W + int64_t(at.h) * D;
    for (int c = lane * P; c < D; c += 32 * P) {
      float xv[P], gv[P];
      dx_store_pack<T, P, false>(dxr, xr, dyr, nullptr, w, w_off, c, 0.0f, rs, 0.0f, mgx, xv, gv);
    }
  }
}

// dw[i] = sum over a weight's head rows of dy * x * rstd, in parts: thread (p, i) of the first
// Pa * D threads sums wa's rows [p La, (p + 1) La) in row order n ha + h, the next Pb * D threads
// wb's likewise (consecutive threads: consecutive columns of one head row). A null parts pointer:
// that weight is skipped.
template <class T>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_heads_dw_kernel(float* __restrict__ parts_a, float* __restrict__ parts_b, const T* __restrict__ dy,
                            const T* __restrict__ x, const float* __restrict__ rstd, int64_t N, int ha, int hb, int D,
                            int W, int64_t xs, int64_t Pa, int64_t Pb) {
  const int H = ha + hb;
  const int64_t total = (Pa + Pb) * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const bool a = e < Pa * D;
    const int64_t local = a ? e : e - Pa * D, P = a ? Pa : Pb, p = local / D;
    const int i = int(local - p * D), hc = a ? ha : hb, h0 = a ? 0 : ha;
    const int64_t R = N * hc, L = (R + P - 1) / P, r0 = p * L, r1 = r0 + L < R ? r0 + L : R;
    float acc = 0.0f;
    if (r0 < r1) {
      int64_t n = r0 / hc;
      int h = int(r0 - n * hc);
#pragma unroll 4
      for (int64_t r = r0; r < r1; ++r) {
        const int hh = h0 + h;
        const float g = to_f32(dy[n * W + int64_t(hh) * D + i]);
        acc += g * to_f32(x[n * xs + int64_t(hh) * D + i]) * rstd[n * H + hh];
        if (++h == hc) h = 0, ++n;
      }
    }
    (a ? parts_a : parts_b)[local] = acc;
  }
}

unsigned item_grid(int64_t items) {
  const int64_t b = (items + kThreads / 32 - 1) / (kThreads / 32);
  return unsigned(std::clamp<int64_t>(b, 1, 65535));
}

// Packs of 16 bytes when every row, head and pointer is aligned to them; else one element at a time.
template <class T> bool heads_vectorise(int64_t D, int64_t W, int64_t xs, std::initializer_list<const void*> ptrs) {
  constexpr int64_t P = kVec<T>;
  if (D % P != 0 || W % P != 0 || xs % P != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

void check_heads(const char* op, const Tensor& rows, const char* rows_name, const Tensor& x, const Tensor& wa,
                 const Tensor& wb, const Tensor& rstd, int64_t ha, int64_t hb, int64_t D) {
  const bool ok = x.dim() == 2 && x.strides()[1] == 1 && D > 0 && ha >= 0 && hb >= 0 && (ha + hb) * D <= x.size(1) &&
                  x.size(1) <= (int64_t(1) << 30) && rows.is_contiguous() && rows.shape() == x.shape() &&
                  rows.dtype() == x.dtype() && wa.is_contiguous() && wb.is_contiguous() && wa.numel() == D &&
                  wb.numel() == D && wa.dtype() == x.dtype() && wb.dtype() == x.dtype() &&
                  rstd.dtype() == DType::F32 && rstd.is_contiguous() && rstd.numel() == x.size(0) * (ha + hb);
  LT_CHECK(ok,
           std::string(op) + ": x " + shape_str(x.shape()) + ", " + rows_name + " " + shape_str(rows.shape()) + ", " +
               std::to_string(ha) + " + " + std::to_string(hb) + " heads of " + std::to_string(D),
           std::string("the kernels take x [N, W] with unit column stride (W >= (ha + hb) D), ") + rows_name +
               " contiguous [N, W] of x's dtype, wa and wb contiguous [D] of x's dtype, rstd f32 [N (ha + hb)]",
           "pass the op front-end's views");
}

}  // namespace

void CudaBackend::rmsnorm_heads_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& wa,
                                    const Tensor& wb, int64_t ha, int64_t hb, int64_t D, float eps, float w_offset) {
  check_heads("rmsnorm_heads_fwd", y, "y", x, wa, wb, rstd, ha, hb, D);
  const int64_t N = x.size(0), W = x.size(1), xs = x.strides()[0], H = ha + hb;
  const int64_t items = N * H + (W > H * D ? N : 0);
  if (items == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T *px = x.data<T>(), *pa = wa.data<T>(), *pb = wb.data<T>();
    auto go = [&](auto ptag) {
      constexpr int P = decltype(ptag)::value;
      rmsnorm_heads_fwd_kernel<T, P><<<item_grid(items), kThreads, 0, current_stream()>>>(
          py, rstd.data<float>(), px, pa, pb, N, int(ha), int(H), int(D), int(W), xs, eps, w_offset);
    };
    if (heads_vectorise<T>(D, W, xs, {py, px, pa, pb})) go(std::integral_constant<int, kVec<T>>{});
    else go(std::integral_constant<int, 1>{});
    LT_CUDA_LAUNCH_CHECK("rmsnorm_heads_fwd_kernel");
  });
}

void CudaBackend::rmsnorm_heads_bwd(const Tensor& dx, const Tensor& dwa_parts, const Tensor& dwb_parts,
                                    const Tensor& dy, const Tensor& x, const Tensor& wa, const Tensor& wb,
                                    const Tensor& rstd, int64_t ha, int64_t hb, int64_t D, float w_offset) {
  const char* op = "rmsnorm_heads_bwd";
  check_heads(op, dx, "dx", x, wa, wb, rstd, ha, hb, D);
  check_heads(op, dy, "dy", x, wa, wb, rstd, ha, hb, D);
  for (const Tensor* p : {&dwa_parts, &dwb_parts})
    LT_CHECK(!p->defined() || (p->dim() == 2 && p->size(1) == D && p->dtype() == DType::F32 && p->is_contiguous()),
             std::string(op) + ": weight gradient parts " + shape_str(p->shape()),
             "they are contiguous f32 [P, D]", "pass the op front-end's parts");
  const int64_t N = x.size(0), W = x.size(1), xs = x.strides()[0], H = ha + hb;
  const int64_t items = N * H + (W > H * D ? N : 0);
  const int64_t Pa = dwa_parts.defined() ? dwa_parts.size(0) : 0, Pb = dwb_parts.defined() ? dwb_parts.size(0) : 0;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* pdx = dx.data<T>();
    const T *pdy = dy.data<T>(), *px = x.data<T>(), *pa = wa.data<T>(), *pb = wb.data<T>();
    const float* pr = rstd.data<float>();
    if (items > 0) {
      auto go = [&](auto ptag) {
        constexpr int P = decltype(ptag)::value;
        rmsnorm_heads_dx_kernel<T, P><<<item_grid(items), kThreads, 0, current_stream()>>>(
            pdx, pdy, px, pa, pb, pr, N, int(ha), int(H), int(D), int(W), xs, w_offset);
      };
      if (heads_vectorise<T>(D, W, xs, {pdx, pdy, px, pa, pb})) go(std::integral_constant<int, kVec<T>>{});
      else go(std::integral_constant<int, 1>{});
      LT_CUDA_LAUNCH_CHECK("rmsnorm_heads_dx_kernel");
    }
    // Every part is written, zero where it has no rows (N = 0, or a weight with no heads).
    if (Pa + Pb > 0) {
      rmsnorm_heads_dw_kernel<T><<<grid_for((Pa + Pb) * D, kThreads), kThreads, 0, current_stream()>>>(
          Pa ? dwa_parts.data<float>() : nullptr, Pb ? dwb_parts.data<float>() : nullptr, pdy, px, pr, N, int(ha),
          int(hb), int(D), int(W), xs, Pa, Pb);
      LT_CUDA_LAUNCH_CHECK("rmsnorm_heads_dw_kernel");
    }
  });
}

}  // namespace lt
