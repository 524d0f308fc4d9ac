// The gated RMSNorm of Gated DeltaNet's output (transformers' Qwen3_5RMSNormGated), with the CPU's
// rounding (cpu_norm_gated.cpp). One warp a group of D columns (a head of a token) for the
// forward and for dx, dz; the weight's gradient in parts: one thread a (part, column) summing its
// part's rows in order, which the front-end adds. No atomics: the same bits every run.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

template <class T> __device__ __forceinline__ float rounded(float v) {
  T t;
  store_t(&t, 0, v);
  return load_t(&t, 0);
}

template <class T>
__global__ void rmsnorm_gated_fwd_kernel(T* y, float* rstd, const T* x, const T* z, const T* w, int64_t rows, int G,
                                         int D, int64_t zs, float eps) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const int64_t n = row / G, g = row - n * G, xo = n * G * D + g * D, zo = n * zs + g * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) ss += load_t(x, xo + i) * load_t(x, xo + i);
    ss = warp_sum(ss);
    const float r = 1.f / sqrtf(ss / float(D) + eps);
    if (lane == 0) rstd[row] = r;
    for (int i = lane; i < D; i += 32) {
      const float nrm = rounded<T>(load_t(x, xo + i) * r);
      const float p = rounded<T>(load_t(w, i) * nrm);
      const float zz = load_t(z, zo + i);
      store_t(y, xo + i, p * (zz / (1.f + expf(-zz))));
    }
  }
}

template <class T>
__global__ void rmsnorm_gated_bwd_kernel(T* dx, T* dz, const T* dy, const T* x, const T* z, const T* w,
                                         const float* rstd, int64_t rows, int G, int D, int64_t zs) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const int64_t n = row / G, g = row - n * G, xo = n * G * D + g * D, zo = n * zs + g * D;
    const float r = rstd[row];
    // dn_i = round(round(dy s) w): recomputed in both passes (the first for the dot product).
    auto dn_at = [&](int i, float* dzv) {
      const float xv = load_t(x, xo + i), nrm = rounded<T>(xv * r), wv = load_t(w, i);
      const float p = rounded<T>(wv * nrm);
      const float zz = load_t(z, zo + i), sg = 1.f / (1.f + expf(-zz)), s = zz * sg;
      const float d = load_t(dy, xo + i);
      const float dp = rounded<T>(d * s);
      if (dzv) *dzv = d * p * sg * (1.f + zz * (1.f - sg));
      return rounded<T>(dp * wv);
    };
    float dot = 0.f;
    for (int i = lane; i < D; i += 32) dot += dn_at(i, nullptr) * load_t(x, xo + i) * r;
    dot = warp_sum(dot);
    for (int i = lane; i < D; i += 32) {
      float dzv = 0.f;
      const float dn = dn_at(i, &dzv);
      store_t(dz, xo + i, dzv);
      store_t(dx, xo + i, r * (dn - load_t(x, xo + i) * r * dot / float(D)));
    }
  }
}

template <class T>
__global__ void rmsnorm_gated_dw_kernel(float* parts, const T* dy, const T* x, const T* z, const T* w,
                                        const float* rstd, int64_t rows, int64_t P, int64_t L, int G, int D,
                                        int64_t zs) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < P * D; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / D;
    const int i = int(e - p * D);
    float acc = 0.f;
    const int64_t end = (p + 1) * L < rows ? (p + 1) * L : rows;
    for (int64_t row = p * L; row < end; ++row) {
      const int64_t n = row / G, g = row - n * G, xo = n * G * D + g * D, zo = n * zs + g * D;
      const float nrm = rounded<T>(load_t(x, xo + i) * rstd[row]);
      const float zz = load_t(z, zo + i), s = zz / (1.f + expf(-zz));
      acc += rounded<T>(load_t(dy, xo + i) * s) * nrm;
    }
    parts[e] = acc;
  }
}

unsigned rows_grid(int64_t rows) {
  const int64_t b = (rows + kThreads / 32 - 1) / (kThreads / 32);
  return unsigned(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace

void CudaBackend::rmsnorm_gated_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& z,
                                    const Tensor& w, float eps) {
  LT_CHECK(x.dim() == 2 && x.is_contiguous() && y.is_contiguous() && z.dim() == 2 && z.strides()[1] == 1 &&
               w.is_contiguous() && rstd.dtype() == DType::F32 && w.dtype() == x.dtype() && z.dtype() == x.dtype(),
           "rmsnorm_gated_fwd: x, y contiguous [N, G D], z [N, G D] with unit stride on its rows, w [D] of x's dtype, "
           "rstd f32",
           "the kernel reads and writes rows", "");
  const int D = int(w.size(0)), G = int(x.size(1) / D);
  const int64_t rows = x.size(0) * G;
  if (rows == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_gated_fwd_kernel<T><<<rows_grid(rows), kThreads, 0, current_stream()>>>(
        y.data<T>(), rstd.data<float>(), x.data<T>(), z.data<T>(), w.data<T>(), rows, G, D, z.strides()[0], eps);
    LT_CUDA_LAUNCH_CHECK("rmsnorm_gated_fwd_kernel");
  });
}

void CudaBackend::rmsnorm_gated_bwd(const Tensor& dx, const Tensor& dz, const Tensor& dw_parts, const Tensor& dy,
                                    const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd) {
  LT_CHECK(x.dim() == 2 && x.is_contiguous() && dx.is_contiguous() && dz.is_contiguous() && dy.is_contiguous() &&
               z.dim() == 2 && z.strides()[1] == 1 && w.is_contiguous() && rstd.dtype() == DType::F32 &&
               (!dw_parts.defined() || (dw_parts.dtype() == DType::F32 && dw_parts.is_contiguous())),
           "rmsnorm_gated_bwd: dx, dz, dy, x contiguous [N, G D], z with unit stride on its rows, rstd and dw_parts f32",
           "the kernels read and write rows", "");
  const int D = int(w.size(0)), G = int(x.size(1) / D);
  const int64_t rows = x.size(0) * G, P = dw_parts.defined() ? dw_parts.size(0) : 0;
  const int64_t L = (rows + P - 1) / std::max<int64_t>(P, 1);
  if (rows == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_gated_bwd_kernel<T><<<rows_grid(rows), kThreads, 0, current_stream()>>>(
        dx.data<T>(), dz.data<T>(), dy.data<T>(), x.data<T>(), z.data<T>(), w.data<T>(), rstd.data<float>(), rows, G, D,
        z.strides()[0]);
    LT_CUDA_LAUNCH_CHECK("rmsnorm_gated_bwd_kernel");
    if (P == 0) return;  // w takes no gradient
    rmsnorm_gated_dw_kernel<T><<<grid_for(P * D, kThreads), kThreads, 0, current_stream()>>>(
        dw_parts.data<float>(), dy.data<T>(), x.data<T>(), z.data<T>(), w.data<T>(), rstd.data<float>(), rows, P, L, G,
        D, z.strides()[0]);
    LT_CUDA_LAUNCH_CHECK("rmsnorm_gated_dw_kernel");
  });
}

}  // namespace lt
