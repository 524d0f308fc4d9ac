// The causal depthwise convolution over time with SiLU (Gated DeltaNet's short convolution), with
// the CPU's rounding (cpu_conv1d.cpp): the convolution's f32 sum rounded to the storage type, then
// the SiLU rounded. Forward and dx: one thread an element (K taps; dx recomputes nothing, it reads
// dpre), one block a row's 256 channels. dpre: the same, pre recomputed from x and w. dw: one thread a (channel, tap)
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

// One block a (row b t, 256 channels), one thread a channel: the row's indices once a block (the
// earlier grid-stride form spent more time in 64-bit divisions than in the taps: 0.25 ms for a
// [1, 4096, 6144] bf16 forward on an H200).
struct RowChannel {
  int64_t b, t, c, e;  // e: the element's index in [B, T, C]
  bool in;             // c < C
};
__device__ __forceinline__ RowChannel row_channel(int64_t Tlen, int64_t C, unsigned cblocks) {
  const unsigned row_block = blockIdx.x / cblocks, cb = blockIdx.x - row_block * cblocks;
  RowChannel r;
  const unsigned b = row_block / unsigned(Tlen);  // rows < 2^31 (row_grid)
  r.b = b, r.t = row_block - b * unsigned(Tlen), r.c = int64_t(cb) * blockDim.x + threadIdx.x;
  r.e = int64_t(row_block) * C + r.c;
  r.in = r.c < C;
  return r;
}

template <class T>
__global__ void conv1d_fwd_kernel(T* out, const T* x, const T* w, const int32_t* dp, int64_t Tlen, int64_t C, int K,
                                  int64_t sb, int64_t st, bool silu, unsigned cblocks) {
  const RowChannel r = row_channel(Tlen, C, cblocks);
  if (!r.in) return;
  const float pre = pre_at(x, w, dp, r.b, r.t, r.c, Tlen, K, sb, st);
  store_t(out, r.e, silu ? silu_f(pre) : pre);
}

template <class T>
__global__ void conv1d_dpre_kernel(T* dpre, const T* dout, const T* x, const T* w, const int32_t* dp, int64_t Tlen,
                                   int64_t C, int K, int64_t sb, int64_t st, bool silu, unsigned cblocks) {
  const RowChannel r = row_channel(Tlen, C, cblocks);
  if (!r.in) return;
  const float d = load_t(dout, r.e);
  store_t(dpre, r.e, silu ? d * silu_grad_f(pre_at(x, w, dp, r.b, r.t, r.c, Tlen, K, sb, st)) : d);
}

template <class T>
__global__ void conv1d_dx_kernel(T* dx, const T* dpre, const T* w, const int32_t* dp, int64_t Tlen, int64_t C, int K,
                                 unsigned cblocks) {
  const RowChannel r = row_channel(Tlen, C, cblocks);
  if (!r.in) return;
  float acc = 0.f;
  for (int j = 0; j < K; ++j) {
    const int64_t to = r.t + K - 1 - j;
    if (to < Tlen && conv_tap_in_document(dp, r.b, Tlen, to, K - 1 - j))
      acc += load_t(w, r.c * K + j) * load_t(dpre, (r.b * Tlen + to) * C + r.c);
  }
  store_t(dx, r.e, acc);
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

// The row-channel kernels' grid: B T rows of ceil(C / kThreads) blocks.
struct RowGrid {
  unsigned blocks, cblocks;
};
RowGrid row_grid(const Tensor& x) {
  const int64_t cblocks = (x.size(2) + kThreads - 1) / kThreads, blocks = x.size(0) * x.size(1) * cblocks;
  LT_CHECK(blocks < (int64_t(1) << 31), "conv1d: " + shape_str(x.shape()) + " needs " + std::to_string(blocks) + " blocks",
           "the kernels launch one block per row and 256 channels, at most 2^31 - 1", "use fewer rows per call");
  return {unsigned(blocks), unsigned(cblocks)};
}

}  // namespace

void CudaBackend::conv1d_causal_fwd(const Tensor& out, const Tensor& x, const Tensor& w, bool silu,
                                    const Tensor& doc_pos) {
  check_conv(x, w, doc_pos, "conv1d_causal_fwd");
  LT_CHECK(out.is_contiguous() && out.shape() == x.shape(), "conv1d_causal_fwd: out must be contiguous, x's shape",
           "the kernel writes it densely", "");
  const int64_t total = x.numel();
  if (total == 0) return;
  const RowGrid rg = row_grid(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv1d_fwd_kernel<T><<<rg.blocks, kThreads, 0, current_stream()>>>(
        out.data<T>(), x.data<T>(), w.data<T>(), doc_ptr(doc_pos), x.size(1), x.size(2), int(w.size(1)),
        x.strides()[0], x.strides()[1], silu, rg.cblocks);
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
  const RowGrid rg = row_grid(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv1d_dpre_kernel<T><<<rg.blocks, kThreads, 0, current_stream()>>>(
        dpre.data<T>(), dout.data<T>(), x.data<T>(), w.data<T>(), dp, T_len, C, K, x.strides()[0], x.strides()[1],
        silu, rg.cblocks);
    LT_CUDA_LAUNCH_CHECK("conv1d_dpre_kernel");
    if (dx.defined()) {
      conv1d_dx_kernel<T><<<rg.blocks, kThreads, 0, current_stream()>>>(
          dx.data<T>(), dpre.data<T>(), w.data<T>(), dp, T_len, C, K, rg.cblocks);
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
