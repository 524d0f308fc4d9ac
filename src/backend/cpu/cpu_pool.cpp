// Max pooling over NCHW or NHWC images on the CPU (one plane per image and channel, addressed
// through Planes, so both layouts take the same maxima and sums). The forward keeps each maximum's window position as
// one byte; the backward gathers, for each input pixel, the gradients of the windows that took
// it, in a fixed order (the CUDA kernel sums in the same order).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

// Pixel (h, w) of plane p = n C + c of an H x W image batch, in either layout: base(p) + h
// row + w col.
struct Planes {
  int64_t C, H, W;
  bool channels_last;
  int64_t row() const { return channels_last ? W * C : W; }
  int64_t col() const { return channels_last ? C : 1; }
  int64_t base(int64_t p) const { return channels_last ? (p / C) * H * W * C + p % C : p * H * W; }
};

}  // namespace

void CpuBackend::maxpool2d_fwd(const Tensor& y, const Tensor& indices, const Tensor& x, const Pool2dDesc& d) {
  const ImageDims xd = image_dims(x.shape(), d.channels_last), yd = image_dims(y.shape(), d.channels_last);
  const int64_t planes = xd.n * xd.c, H = xd.h, W = xd.w, OH = yd.h, OW = yd.w;
  const Planes in{xd.c, H, W, d.channels_last}, out{xd.c, OH, OW, d.channels_last};
  uint8_t* ip = indices.data<uint8_t>();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const int64_t in_row = in.row(), in_col = in.col(), out_row = out.row(), out_col = out.col();
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t in_base = in.base(p), out_base = out.base(p);
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          A best = -INFINITY;
          int64_t arg = -1;
          for (int64_t ki = 0; ki < d.kernel_h; ++ki)
            for (int64_t kj = 0; kj < d.kernel_w; ++kj) {
              const int64_t ih = oh * d.stride_h - d.pad_h + ki, iw = ow * d.stride_w - d.pad_w + kj;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const A v = ld(xp, in_base + ih * in_row + iw * in_col);
              if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) best = v, arg = ki * d.kernel_w + kj;
            }
          const int64_t o = out_base + oh * out_row + ow * out_col;
          st(yp, o, best);
          ip[o] = uint8_t(arg);
        }
    }
  });
}

void CpuBackend::maxpool2d_bwd(const Tensor& dx, const Tensor& dy, const Tensor& indices, const Pool2dDesc& d) {
  const ImageDims xd = image_dims(dx.shape(), d.channels_last), yd = image_dims(dy.shape(), d.channels_last);
  const int64_t planes = xd.n * xd.c, H = xd.h, W = xd.w, OH = yd.h, OW = yd.w;
  const Planes in{xd.c, H, W, d.channels_last}, out{xd.c, OH, OW, d.channels_last};
  const uint8_t* ip = indices.data<uint8_t>();
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* gp = dy.data<T>();
    T* dp = dx.data<T>();
    const int64_t in_row = in.row(), in_col = in.col(), out_row = out.row(), out_col = out.col();
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t in_base = in.base(p), out_base = out.base(p);
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw) {
          // Windows oh with oh * stride - pad <= ih < oh * stride - pad + kernel.
          const int64_t oh0 = std::max<int64_t>(0, (ih + d.pad_h - d.kernel_h + d.stride_h) / d.stride_h);
          const int64_t oh1 = std::min<int64_t>(OH - 1, (ih + d.pad_h) / d.stride_h);
          const int64_t ow0 = std::max<int64_t>(0, (iw + d.pad_w - d.kernel_w + d.stride_w) / d.stride_w);
          const int64_t ow1 = std::min<int64_t>(OW - 1, (iw + d.pad_w) / d.stride_w);
          A sum = 0;
          for (int64_t oh = oh0; oh <= oh1; ++oh)
            for (int64_t ow = ow0; ow <= ow1; ++ow) {
              const int64_t o = out_base + oh * out_row + ow * out_col;
              const int64_t pos = (ih - (oh * d.stride_h - d.pad_h)) * d.kernel_w + (iw - (ow * d.stride_w - d.pad_w));
              if (ip[o] == pos) sum += ld(gp, o);
            }
          st(dp, in_base + ih * in_row + iw * in_col, sum);
        }
    }
  });
}

}  // namespace lt
