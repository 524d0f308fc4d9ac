// The causal depthwise convolution over time with SiLU (Gated DeltaNet's short convolution), with
// the CPU's rounding (cpu_conv1d.cpp): the convolution's f32 sum rounded to the storage type, then
// the SiLU rounded. Forward and dx: one thread an element (K taps; dx recomputes nothing, it reads
// dpre). dpre: one thread an element, pre recomputed from x and w. dw: one thread a (channel, tap)
// summing every (b, t) in order: deterministic, no atomics, coalesced across channels. With doc_pos
// (packed documents) no tap crosses a document's start (conv_tap_in_document, as the CPU's).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/delta_docs.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

template <class T> __device__ __forceinline__ float rounded(float v) {
  T t;
  store_t(&t, 0, v);
  return load_t(&t, 0);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float silu_grad_f(float x) {
  const float s = 1.f / (1.f + expf(-x));
  return s * (1.f + x * (1.f - s));
}

template <class T>
__device__ __forceinline__ float pre_at(const T* x, const T* w, const int32_t* dp, int64_t b, int64_t t, int64_t c,
                                        int64_t Tlen, int K, int64_t sb, int64_t st) {
  float acc = 0.f;
  for (int j = 0; j < K; ++j) {
    const int64_t tt = t - K + 1 + j;
    if (conv_tap_in_document(dp, b, Tlen, t, K - 1 - j)) acc += load_t(w, c * K + j) * load_t(x, b * sb + tt * st + c);
  }
  return rounded<T>(acc);
}

template <class T>
__global__ void conv1d_fwd_kernel(T* out, const T* x, const T* w, const int32_t* dp, int64_t B, int64_t Tlen, int64_t C,
                                  int K, int64_t sb, int64_t st, bool silu) {
  const int64_t total = B * Tlen * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, bt = e / C, t = bt % Tlen, b = bt / Tlen;
    const float pre = pre_at(x, w, dp, b, t, c, Tlen, K, sb, st);
    store_t(out, e, silu ? silu_f(pre) : pre);
  }
}

template <class T>
__global__ void conv1d_dpre_kernel(T* dpre, const T* dout, const T* x, const T* w, const int32_t* dp, int64_t B,
                                   int64_t Tlen, int64_t C, int K, int64_t sb, int64_t st, bool silu) {
  const int64_t total = B * Tlen * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, bt = e / C, t = bt % Tlen, b = bt / Tlen;
    const float d = load_t(dout, e);
    store_t(dpre, e, silu ? d * silu_grad_f(pre_at(x, w, dp, b, t, c, Tlen, K, sb, st)) : d);
  }
}

template <class T>
__global__ void conv1d_dx_kernel(T* dx, const T* dpre, const T* w, const int32_t* dp, int64_t B, int64_t Tlen, int64_t C,
                                 int K) {
  const int64_t total = B * Tlen * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, bt = e / C, t = bt % Tlen, b = bt / Tlen;
    float acc = 0.f;
    for (int j = 0; j < K; ++j) {
      const int64_t to = t + K - 1 - j;
      if (to < Tlen && conv_tap_in_document(dp, b, Tlen, to, K - 1 - j))
        acc += load_t(w, c * K + j) * load_t(dpre, (b * Tlen + to) * C + c);
    }
    store_t(dx, e, acc);
  }
}

// One thread a (tap j, channel c): consecutive threads take consecutive channels of one tap.
template <class T, class W>
__global__ void conv1d_dw_kernel(W* dw, const T* dpre, const T* x, const int32_t* dp, int64_t B, int64_t Tlen, int64_t C,
                                 int K, int64_t sb, int64_t st) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < C * K; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e / C, c = e - j * C;
    float acc = 0.f;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tlen; ++t) {
        const int64_t tt = t - K + 1 + j;
        if (conv_tap_in_document(dp, b, Tlen, t, K - 1 - j))
          acc += load_t(dpre, (b * Tlen + t) * C + c) * load_t(x, b * sb + tt * st + c);
      }
    store_t(dw, c * K + j, acc);
  }
}

void check_conv(const Tensor& x, const Tensor& w, const Tensor& doc_pos, const char* op) {
  LT_CHECK(x.dim() == 3 && x.strides()[2] == 1 && w.dim() == 2 && w.is_contiguous() && w.size(0) == x.size(2) &&
               w.dtype() == x.dtype(),
           std::string(op) + ": x must be [B, T, C] with unit stride on C and w a contiguous [C, K] of x's dtype",
           "the kernels read channels densely", "");
  LT_CHECK(!doc_pos.defined() || (doc_pos.dtype() == DType::I32 && doc_pos.is_contiguous() &&
                                  doc_pos.shape() == Shape({x.size(0), x.size(1)})),
           std::string(op) + ": doc_pos must be a contiguous i32 [B, T] tensor", "the kernels read it densely", "");
}

const int32_t* doc_ptr(const Tensor& doc_pos) { return doc_pos.defined() ? doc_pos.data<int32_t>() : nullptr; }

}  // namespace

void CudaBackend::conv1d_causal_fwd(const Tensor& out, const Tensor& x, const Tensor& w, bool silu,
                                    const Tensor& doc_pos) {
  check_conv(x, w, doc_pos, "conv1d_causal_fwd");
  LT_CHECK(out.is_contiguous() && out.shape() == x.shape(), "conv1d_causal_fwd: out must be contiguous, x's shape",
           "the kernel writes it densely", "");
  const int64_t total = x.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv1d_fwd_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        out.data<T>(), x.data<T>(), w.data<T>(), doc_ptr(doc_pos), x.size(0), x.size(1), x.size(2), int(w.size(1)),
        x.strides()[0], x.strides()[1], silu);
    LT_CUDA_LAUNCH_CHECK("conv1d_fwd_kernel");
  });
}

void CudaBackend::conv1d_causal_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dpre, const Tensor& dout,
                                    const Tensor& x, const Tensor& w, bool silu, const Tensor& doc_pos) {
  check_conv(x, w, doc_pos, "conv1d_causal_bwd");
  LT_CHECK(dpre.is_contiguous() && dout.is_contiguous() && dpre.shape() == x.shape() && dout.shape() == x.shape() &&
               (!dx.defined() || (dx.is_contiguous() && dx.shape() == x.shape())) &&
               (!dw.defined() || (dw.is_contiguous() && dw.shape() == w.shape())),
           "conv1d_causal_bwd: dpre, dout, dx must be contiguous [B, T, C] and dw a contiguous [C, K]",
           "the kernels read and write them densely", "");
  const int64_t total = x.numel();
  if (total == 0) return;
  const int64_t B = x.size(0), T_len = x.size(1), C = x.size(2);
  const int K = int(w.size(1));
  const int32_t* dp = doc_ptr(doc_pos);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv1d_dpre_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        dpre.data<T>(), dout.data<T>(), x.data<T>(), w.data<T>(), dp, B, T_len, C, K, x.strides()[0], x.strides()[1],
        silu);
    LT_CUDA_LAUNCH_CHECK("conv1d_dpre_kernel");
    if (dx.defined()) {
      conv1d_dx_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
          dx.data<T>(), dpre.data<T>(), w.data<T>(), dp, B, T_len, C, K);
      LT_CUDA_LAUNCH_CHECK("conv1d_dx_kernel");
    }
    if (dw.defined())
      dispatch_float(dw.dtype(), [&](auto wtag) {
        using W = decltype(wtag);
        conv1d_dw_kernel<T, W><<<grid_for(C * K, kThreads), kThreads, 0, current_stream()>>>(
            dw.data<W>(), dpre.data<T>(), x.data<T>(), dp, B, T_len, C, K, x.strides()[0], x.strides()[1]);
        LT_CUDA_LAUNCH_CHECK("conv1d_dw_kernel");
      });
  });
}

}  // namespace lt
