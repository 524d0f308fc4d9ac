// Max pooling over NCHW or NHWC images: one thread per output in the forward (its window
// position kept as one byte), one thread per input pixel in the backward, which gathers the
// gradients of the windows that took it in the CPU's order (no atomics).
//
// One kernel per pass serves both layouts: threads take elements in storage order (for NHWC the
// channel is fastest, so a warp's accesses are coalesced), split the index into (n, c, h, w) by
// the layout and address the other tensor through its strides. Window order, byte positions and
// the backward's summation order are the same in both layouts.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

// An image's sizes by meaning and its element strides by meaning, for either storage order.
struct Img {
  int64_t C, H, W;
  int64_t sn, sc, sh, sw;
  __device__ __forceinline__ int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return n * sn + c * sc + h * sh + w * sw;
  }
};

Img img_of(const Tensor& t, bool channels_last) {
  const ImageDims d = image_dims(t.shape(), channels_last);
  if (channels_last) return {d.c, d.h, d.w, d.h * d.w * d.c, 1, d.w * d.c, d.c};
  return {d.c, d.h, d.w, d.c * d.h * d.w, d.h * d.w, d.w, 1};
}

// Storage index i of an image of sizes C, H, W -> (n, c, h, w) in the index type U; CL: NHWC
// storage, else NCHW.
template <bool CL, class U>
__device__ __forceinline__ void split_as(U i, U C, U H, U W, int64_t& n, int64_t& c, int64_t& h, int64_t& w) {
  if (CL) {
    c = i % C, i /= C;
    w = i % W, i /= W;
    h = i % H, n = i / H;
  } else {
    w = i % W, i /= W;
    h = i % H, i /= H;
    c = i % C, n = i / C;
  }
}

// 32-bit division where the index fits (any batch under 2^31 elements): a 64-bit division is a
// long instruction sequence, and the split is most of a pooling thread's work.
template <bool CL>
__device__ __forceinline__ void split(int64_t i, const Img& g, int64_t& n, int64_t& c, int64_t& h, int64_t& w) {
  if (i <= INT32_MAX && g.C * g.H * g.W <= INT32_MAX)
    split_as<CL, uint32_t>(uint32_t(i), uint32_t(g.C), uint32_t(g.H), uint32_t(g.W), n, c, h, w);
  else
    split_as<CL, int64_t>(i, g.C, g.H, g.W, n, c, h, w);
}

template <class T, bool CL>
__global__ void maxpool_fwd_kernel(T* y, uint8_t* idx, const T* x, int64_t total, Img xi, Img yi, Pool2dDesc d) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, oh, ow;
    split<CL>(o, yi, n, c, oh, ow);
    const int64_t base = xi.at(n, c, 0, 0);
    float best = -INFINITY;
    int arg = -1;
    for (int64_t ki = 0; ki < d.kernel_h; ++ki)
      for (int64_t kj = 0; kj < d.kernel_w; ++kj) {
        const int64_t ih = oh * d.stride_h - d.pad_h + ki, iw = ow * d.stride_w - d.pad_w + kj;
        if (ih < 0 || ih >= xi.H || iw < 0 || iw >= xi.W) continue;
        const float v = load_t(x, base + ih * xi.sh + iw * xi.sw);
        if (arg < 0 || v > best || (isnan(v) && !isnan(best))) best = v, arg = int(ki * d.kernel_w + kj);
      }
    store_t(y, o, best);
    idx[o] = uint8_t(arg);
  }
}

// The window of one pooling dimension as 32-bit ints: image sides, kernels, strides and pads are
// far below 2^31 (the launcher checks), and 64-bit divisions here were most of the backward's time
// (0.6 ms a call for resnet50's stem at B32 on an H100).
struct Win {
  int kernel, stride, pad, out;
};

template <class T, bool CL>
__global__ void maxpool_bwd_kernel(T* dx, const T* dy, const uint8_t* idx, int64_t total, Img xi, Img yi, Win wh,
                                   Win ww) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, ih64, iw64;
    split<CL>(i, xi, n, c, ih64, iw64);
    const int ih = int(ih64), iw = int(iw64);
    const int64_t base = yi.at(n, c, 0, 0);
    // Windows oh with oh * stride - pad <= ih < oh * stride - pad + kernel (numerators >= 1 - stride,
    // so the division truncates toward zero only where the max below takes 0 anyway).
    const int oh0 = max(0, (ih + wh.pad - wh.kernel + wh.stride) / wh.stride);
    const int oh1 = min(wh.out - 1, (ih + wh.pad) / wh.stride);
    const int ow0 = max(0, (iw + ww.pad - ww.kernel + ww.stride) / ww.stride);
    const int ow1 = min(ww.out - 1, (iw + ww.pad) / ww.stride);
    float s = 0;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = base + oh * yi.sh + ow * yi.sw;
        const int pos = (ih - (oh * wh.stride - wh.pad)) * ww.kernel + (iw - (ow * ww.stride - ww.pad));
        if (idx[o] == pos) s += load_t(dy, o);
      }
    store_t(dx, i, s);
  }
}

void check_images(const Tensor& t, DType dt, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.dim() == 4 && t.is_contiguous() && t.dtype() == dt && t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " must be a contiguous 4-D " + dtype_name(dt) + " tensor on cuda:" +
               std::to_string(dev),
           "the kernel indexes the images (NCHW, or NHWC when channels_last) densely", "");
}

// Calls f(std::bool_constant<channels_last>).
template <class F> void dispatch_layout(bool channels_last, F&& f) {
  if (channels_last)
    f(std::true_type{});
  else
    f(std::false_type{});
}

}  // namespace

void CudaBackend::maxpool2d_fwd(const Tensor& y, const Tensor& indices, const Tensor& x, const Pool2dDesc& d) {
  check_images(x, x.dtype(), device_index_, "maxpool2d_fwd", "x");
  check_images(y, x.dtype(), device_index_, "maxpool2d_fwd", "y");
  check_images(indices, DType::U8, device_index_, "maxpool2d_fwd", "indices");
  const int64_t total = y.numel();
  if (total == 0) return;
  const Img xi = img_of(x, d.channels_last), yi = img_of(y, d.channels_last);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_layout(d.channels_last, [&](auto cl) {
      maxpool_fwd_kernel<T, decltype(cl)::value><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
          y.data<T>(), indices.data<uint8_t>(), x.data<T>(), total, xi, yi, d);
      LT_CUDA_LAUNCH_CHECK("maxpool_fwd_kernel");
    });
  });
}

void CudaBackend::maxpool2d_bwd(const Tensor& dx, const Tensor& dy, const Tensor& indices, const Pool2dDesc& d) {
  check_images(dx, dx.dtype(), device_index_, "maxpool2d_bwd", "dx");
  check_images(dy, dx.dtype(), device_index_, "maxpool2d_bwd", "dy");
  check_images(indices, DType::U8, device_index_, "maxpool2d_bwd", "indices");
  const int64_t total = dx.numel();
  if (total == 0) return;
  const Img xi = img_of(dx, d.channels_last), yi = img_of(dy, d.channels_last);
  constexpr int64_t kMax = INT32_MAX / 4;  // ih + pad + stride and (ih - ...) * kernel stay in an int
  LT_CHECK(xi.H < kMax && xi.W < kMax && d.kernel_h * d.kernel_w <= 256 && d.stride_h < kMax && d.stride_w < kMax &&
               d.pad_h < kMax && d.pad_w < kMax,
           "maxpool2d_bwd: image sides, strides and pads must be below 2^29, windows at most 256 positions",
           "the window arithmetic is 32-bit and a position is one byte", "");
  const Win wh{int(d.kernel_h), int(d.stride_h), int(d.pad_h), int(yi.H)};
  const Win ww{int(d.kernel_w), int(d.stride_w), int(d.pad_w), int(yi.W)};
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_layout(d.channels_last, [&](auto cl) {
      maxpool_bwd_kernel<T, decltype(cl)::value><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
          dx.data<T>(), dy.data<T>(), indices.data<uint8_t>(), total, xi, yi, wh, ww);
      LT_CUDA_LAUNCH_CHECK("maxpool_bwd_kernel");
    });
  });
}

}  // namespace lt
