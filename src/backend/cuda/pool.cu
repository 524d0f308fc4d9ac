// Max pooling over NCHW images: one thread per output in the forward (its window position kept
// as one byte), one thread per input pixel in the backward, which gathers the gradients of the
// windows that took it in the CPU's order (no atomics).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void maxpool_fwd_kernel(T* y, uint8_t* idx, const T* x, int64_t total, int64_t H, int64_t W, int64_t OH,
                                   int64_t OW, Pool2dDesc d) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, p = o / (OW * OH);
    float best = -INFINITY;
    int arg = -1;
    for (int64_t ki = 0; ki < d.kernel_h; ++ki)
      for (int64_t kj = 0; kj < d.kernel_w; ++kj) {
        const int64_t ih = oh * d.stride_h - d.pad_h + ki, iw = ow * d.stride_w - d.pad_w + kj;
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
        const float v = load_t(x, (p * H + ih) * W + iw);
        if (arg < 0 || v > best || (isnan(v) && !isnan(best))) best = v, arg = int(ki * d.kernel_w + kj);
      }
    store_t(y, o, best);
    idx[o] = uint8_t(arg);
  }
}

template <class T>
__global__ void maxpool_bwd_kernel(T* dx, const T* dy, const uint8_t* idx, int64_t total, int64_t H, int64_t W,
                                   int64_t OH, int64_t OW, Pool2dDesc d) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = i % W, ih = (i / W) % H, p = i / (W * H);
    const int64_t oh0 = max(int64_t(0), (ih + d.pad_h - d.kernel_h + d.stride_h) / d.stride_h);
    const int64_t oh1 = min(OH - 1, (ih + d.pad_h) / d.stride_h);
    const int64_t ow0 = max(int64_t(0), (iw + d.pad_w - d.kernel_w + d.stride_w) / d.stride_w);
    const int64_t ow1 = min(OW - 1, (iw + d.pad_w) / d.stride_w);
    float s = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = (p * OH + oh) * OW + ow;
        const int64_t pos = (ih - (oh * d.stride_h - d.pad_h)) * d.kernel_w + (iw - (ow * d.stride_w - d.pad_w));
        if (idx[o] == pos) s += load_t(dy, o);
      }
    store_t(dx, i, s);
  }
}

void check_images(const Tensor& t, DType dt, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.dim() == 4 && t.is_contiguous() && t.dtype() == dt && t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " must be a contiguous 4-D " + dtype_name(dt) + " tensor on cuda:" +
               std::to_string(dev),
           "the kernel indexes NCHW images densely", "");
}

}  // namespace

void CudaBackend::maxpool2d_fwd(const Tensor& y, const Tensor& indices, const Tensor& x, const Pool2dDesc& d) {
  check_images(x, x.dtype(), device_index_, "maxpool2d_fwd", "x");
  check_images(y, x.dtype(), device_index_, "maxpool2d_fwd", "y");
  check_images(indices, DType::U8, device_index_, "maxpool2d_fwd", "indices");
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    maxpool_fwd_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        y.data<T>(), indices.data<uint8_t>(), x.data<T>(), total, x.size(2), x.size(3), y.size(2), y.size(3), d);
    LT_CUDA_LAUNCH_CHECK("maxpool_fwd_kernel");
  });
}

void CudaBackend::maxpool2d_bwd(const Tensor& dx, const Tensor& dy, const Tensor& indices, const Pool2dDesc& d) {
  check_images(dx, dx.dtype(), device_index_, "maxpool2d_bwd", "dx");
  check_images(dy, dx.dtype(), device_index_, "maxpool2d_bwd", "dy");
  check_images(indices, DType::U8, device_index_, "maxpool2d_bwd", "indices");
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    maxpool_bwd_kernel<T><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        dx.data<T>(), dy.data<T>(), indices.data<uint8_t>(), total, dx.size(2), dx.size(3), dy.size(2), dy.size(3), d);
    LT_CUDA_LAUNCH_CHECK("maxpool_bwd_kernel");
  });
}

}  // namespace lt
