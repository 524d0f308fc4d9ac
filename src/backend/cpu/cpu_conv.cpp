// 2-D convolution on the CPU: im2col per image, then one BLAS GEMM (f32 or f64; 16-bit data is
// widened to f32 host scratch, as cpu_gemm.cpp does). Channels-last operands are read into and
// written from that scratch in NCHW order, so both layouts compute the same bits. The workspace
// tensor is cuDNN's and is not used here.
#include <cblas.h>

#include <vector>

#include "backend/cpu/blas_call.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

struct Geometry {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t rows() const { return C * KH * KW; }  // im2col rows
  int64_t cols() const { return OH * OW; }      // im2col columns: output pixels
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& y, bool channels_last) {
  const ImageDims xd = image_dims(x.shape(), channels_last), wd = image_dims(w.shape(), channels_last),
                  yd = image_dims(y.shape(), channels_last);
  return {xd.n, xd.c, xd.h, xd.w, wd.n, wd.h, wd.w, yd.h, yd.w};
}

// Calls f(i, j) for every element: i its index in NCHW order, j its place in t's layout (an NHWC
// one when channels_last). Loops in memory order, without a division per element.
template <class F> void for_nchw_order(const Tensor& t, bool channels_last, F f) {
  if (!channels_last) {
    for (int64_t i = 0; i < t.numel(); ++i) f(i, i);
    return;
  }
  const ImageDims d = image_dims(t.shape(), true);
  int64_t j = 0;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t h = 0; h < d.h; ++h)
      for (int64_t w = 0; w < d.w; ++w)
        for (int64_t c = 0; c < d.c; ++c) f(((n * d.c + c) * d.h + h) * d.w + w, j++);
}

// The whole tensor in the accumulation type, in NCHW order.
template <class T, class A> std::vector<A> widened(const Tensor& t, bool channels_last) {
  std::vector<A> v(size_t(t.numel()));
  const T* p = t.data<T>();
  for_nchw_order(t, channels_last, [&](int64_t i, int64_t j) { v[size_t(i)] = ld(p, j); });
  return v;
}

// v (NCHW order) stored into t's layout.
template <class T, class A> void store_all(const Tensor& t, const std::vector<A>& v, bool channels_last) {
  T* p = t.data<T>();
  for_nchw_order(t, channels_last, [&](int64_t i, int64_t j) { st(p, j, v[size_t(i)]); });
}

// Row-major C = alpha op(A) op(B) + beta C.
void gemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta, float* c) {
  const BlasCall blas_call;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              1.0f, a, int(ta ? m : k), b, int(tb ? k : n), beta, c, int(n));
}
void gemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, const double* b, double beta,
             double* c) {
  const BlasCall blas_call;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              1.0, a, int(ta ? m : k), b, int(tb ? k : n), beta, c, int(n));
}

// col [C*KH*KW, OH*OW] of one image x [C, H, W]; zeros where the window reads padding.
template <class A> void im2col(const A* x, A* col, const Geometry& g, const Conv2dDesc& d) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.KH; ++ki)
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        A* row = col + ((c * g.KH + ki) * g.KW + kj) * g.cols();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * d.stride_h - d.pad_h + ki;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = ow * d.stride_w - d.pad_w + kj;
            const bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
            row[oh * g.OW + ow] = in ? x[(c * g.H + ih) * g.W + iw] : A(0);
          }
        }
      }
}

// The adjoint of im2col: dx [C, H, W] = the sum of col's entries that read each pixel.
template <class A> void col2im(const A* col, A* dx, const Geometry& g, const Conv2dDesc& d) {
  std::fill(dx, dx + g.C * g.H * g.W, A(0));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.KH; ++ki)
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        const A* row = col + ((c * g.KH + ki) * g.KW + kj) * g.cols();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * d.stride_h - d.pad_h + ki;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = ow * d.stride_w - d.pad_w + kj;
            if (iw >= 0 && iw < g.W) dx[(c * g.H + ih) * g.W + iw] += row[oh * g.OW + ow];
          }
        }
      }
}

}  // namespace

void CpuBackend::conv2d_fwd(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                            const Conv2dDesc& d, const Tensor&) {
  const bool cl = d.channels_last;
  const Geometry g = geometry(x, w, y, cl);
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> xv = widened<T, A>(x, cl), wv = widened<T, A>(w, cl);
    std::vector<A> bv = bias.defined() ? widened<T, A>(bias, false) : std::vector<A>();
    std::vector<A> col(size_t(g.rows() * g.cols())), yv(size_t(y.numel()));
    for (int64_t n = 0; n < g.N; ++n) {
      im2col(xv.data() + n * g.C * g.H * g.W, col.data(), g, d);
      A* yn = yv.data() + n * g.O * g.cols();
      gemm_rm(false, false, g.O, g.cols(), g.rows(), wv.data(), col.data(), A(0), yn);
      if (!bv.empty())
        for (int64_t o = 0; o < g.O; ++o)
          for (int64_t p = 0; p < g.cols(); ++p) yn[o * g.cols() + p] += bv[size_t(o)];
    }
    store_all<T>(y, yv, cl);
  });
}

void CpuBackend::conv2d_bwd_data(const Tensor& dx, const Tensor& dy, const Tensor& w, const Conv2dDesc& d,
                                 const Tensor&) {
  const bool cl = d.channels_last;
  const Geometry g = geometry(dx, w, dy, cl);
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> dyv = widened<T, A>(dy, cl), wv = widened<T, A>(w, cl);
    std::vector<A> dcol(size_t(g.rows() * g.cols())), dxv(size_t(dx.numel()));
    for (int64_t n = 0; n < g.N; ++n) {
      // dcol [CKK, P] = w^T [CKK, O] @ dy[n] [O, P]
      gemm_rm(true, false, g.rows(), g.cols(), g.O, wv.data(), dyv.data() + n * g.O * g.cols(), A(0), dcol.data());
      col2im(dcol.data(), dxv.data() + n * g.C * g.H * g.W, g, d);
    }
    store_all<T>(dx, dxv, cl);
  });
}

void CpuBackend::conv2d_bwd_filter(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                                   const Conv2dDesc& d, const Tensor&) {
  const bool cl = d.channels_last;
  const Geometry g = geometry(x, dw, dy, cl);
  dispatch_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> dyv = widened<T, A>(dy, cl), xv = widened<T, A>(x, cl);
    std::vector<A> col(size_t(g.rows() * g.cols())), dwv(size_t(g.O * g.rows()), A(0));
    std::vector<A> dbv(size_t(g.O), A(0));
    for (int64_t n = 0; n < g.N; ++n) {
      const A* dyn = dyv.data() + n * g.O * g.cols();
      if (dw.defined()) {
        im2col(xv.data() + n * g.C * g.H * g.W, col.data(), g, d);
        // dw [O, CKK] += dy[n] [O, P] @ col^T [P, CKK]
        gemm_rm(false, true, g.O, g.rows(), g.cols(), dyn, col.data(), A(1), dwv.data());
      }
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t p = 0; p < g.cols(); ++p) dbv[size_t(o)] += dyn[o * g.cols() + p];
    }
    if (dw.defined()) store_all<T>(dw, dwv, cl);
    if (db.defined()) store_all<T>(db, dbv, false);
  });
}

}  // namespace lt
