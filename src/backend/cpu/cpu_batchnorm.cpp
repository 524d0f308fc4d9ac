// Batch norm over NCHW or NHWC images on the CPU: per channel, two passes (mean, then the mean
// squared deviation) in the accumulation type, summing in (n, pixel) order in both layouts, so
// the two give the same bits; the parameters and running statistics may have another floating
// dtype than x (f32 parameters under 16-bit autocast). The GPU's scratch (partials) is unused.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "leantrain/error.h"

namespace lt {
using namespace cpu;

namespace {

// A [C] vector of any floating dtype, as doubles (undefined: `fallback` everywhere).
std::vector<double> read_vec(const Tensor& t, int64_t n, double fallback) {
  std::vector<double> v(size_t(n), fallback);
  if (!t.defined()) return v;
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(ld(t.data<T>(), i));
  });
  return v;
}

void write_vec(const Tensor& t, const std::vector<double>& v) {
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < t.numel(); ++i) st(t.data<T>(), i, acc_t<T>(v[size_t(i)]));
  });
}

// A batch's elements as (channel, offset) pairs in memory order, each channel's in (n, pixel)
// order in both layouts: n, c, pixel for NCHW; n, pixel, c for NHWC. Sums kept per channel thus
// add the same values in the same order whichever the layout.
struct BnDims {
  int64_t N, C, HW;
  bool channels_last;
  template <class F> void visit(F f) const {
    for (int64_t n = 0; n < N; ++n)
      if (channels_last) {
        for (int64_t i = 0, o = n * HW * C; i < HW; ++i)
          for (int64_t c = 0; c < C; ++c, ++o) f(c, o);
      } else {
        for (int64_t c = 0, o = n * C * HW; c < C; ++c)
          for (int64_t i = 0; i < HW; ++i, ++o) f(c, o);
      }
  }
};

BnDims dims_of(const Tensor& x, bool channels_last) {
  const ImageDims d = image_dims(x.shape(), channels_last);
  return {d.n, d.c, d.h * d.w, channels_last};
}

}  // namespace

void CpuBackend::batchnorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& num_batches_tracked, const Tensor& residual,
                               const BatchNormArgs& args, const Tensor&) {
  const BnDims s = dims_of(x, args.channels_last);
  const std::vector<double> wv = read_vec(w, s.C, 1.0), bv = read_vec(b, s.C, 0.0);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    A* mp = aux_data<A>(mean);
    A* ip = aux_data<A>(invstd);
    const A count = A(s.N * s.HW);
    std::vector<double> rm = read_vec(running_mean, s.C, 0.0), rv = read_vec(running_var, s.C, 1.0);
    std::vector<A> mu(size_t(s.C)), inv(size_t(s.C)), scale(size_t(s.C));
    if (args.training) {
      std::vector<A> sum(size_t(s.C), A(0)), sq(size_t(s.C), A(0));
      s.visit([&](int64_t c, int64_t o) { sum[size_t(c)] += ld(xp, o); });
      for (int64_t c = 0; c < s.C; ++c) mu[size_t(c)] = sum[size_t(c)] / count;
      s.visit([&](int64_t c, int64_t o) {
        const A dv = ld(xp, o) - mu[size_t(c)];
        sq[size_t(c)] += dv * dv;
      });
      for (int64_t c = 0; c < s.C; ++c) {
        const A var = sq[size_t(c)] / count;
        inv[size_t(c)] = A(1) / std::sqrt(var + A(args.eps));
        if (running_mean.defined()) {
          const double m = double(args.momentum);
          rm[size_t(c)] = (1 - m) * rm[size_t(c)] + m * double(mu[size_t(c)]);
          rv[size_t(c)] = (1 - m) * rv[size_t(c)] + m * double(sq[size_t(c)] / (count - A(1)));
        }
      }
    } else {
      for (int64_t c = 0; c < s.C; ++c) {
        mu[size_t(c)] = A(rm[size_t(c)]);
        inv[size_t(c)] = A(1) / std::sqrt(A(rv[size_t(c)]) + A(args.eps));
      }
    }
    for (int64_t c = 0; c < s.C; ++c) {
      mp[c] = mu[size_t(c)];
      ip[c] = inv[size_t(c)];
      scale[size_t(c)] = inv[size_t(c)] * A(wv[size_t(c)]);
    }
    // relu before the rounding store: round(relu(v)) is relu(round(v)) bit for bit (NaN -> 0 both
    // ways). A residual is added to the norm rounded to T, as add would read it.
    const T* rp = residual.defined() ? residual.data<T>() : nullptr;
    s.visit([&](int64_t c, int64_t o) {
      A v = (ld(xp, o) - mu[size_t(c)]) * scale[size_t(c)] + A(bv[size_t(c)]);
      if (rp) v = rounded<T>(v) + ld(rp, o);
      st(yp, o, args.relu ? (v > A(0) ? v : A(0)) : v);
    });
    if (args.training && running_mean.defined()) {
      write_vec(running_mean, rm);
      write_vec(running_var, rv);
      if (num_batches_tracked.defined()) num_batches_tracked.data<int64_t>()[0] += 1;
    }
  });
}

void CpuBackend::batchnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                               const Tensor& y, const BatchNormArgs& args, const Tensor&) {
  const BnDims s = dims_of(x, args.channels_last);
  const std::vector<double> wv = read_vec(w, s.C, 1.0);
  std::vector<double> dwv(size_t(s.C)), dbv(size_t(s.C));
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    const T* gp = dy.data<T>();
    const T* yp = args.relu ? y.data<T>() : nullptr;
    const A* mp = aux_data<A>(mean);
    const A* ip = aux_data<A>(invstd);
    const A count = A(s.N * s.HW);
    // dy through the fused relu: relu's backward product (dy * 0 keeps a NaN dy NaN, as it would).
    auto grad = [&](int64_t o) {
      const A g = ld(gp, o);
      return yp ? g * (ld(yp, o) > A(0) ? A(1) : A(0)) : g;
    };
    std::vector<A> sum_dy(size_t(s.C), A(0)), sum_dy_xhat(size_t(s.C), A(0));
    s.visit([&](int64_t c, int64_t o) {
      const A g = grad(o);
      sum_dy[size_t(c)] += g;
      sum_dy_xhat[size_t(c)] += g * (ld(xp, o) - mp[c]) * ip[c];
    });
    for (int64_t c = 0; c < s.C; ++c) {
      dwv[size_t(c)] = double(sum_dy_xhat[size_t(c)]);
      dbv[size_t(c)] = double(sum_dy[size_t(c)]);
    }
    if (!dx.defined()) return;
    T* dp = dx.data<T>();
    s.visit([&](int64_t c, int64_t o) {
      const A k = A(wv[size_t(c)]) * ip[c], g = grad(o);
      if (args.training) {
        const A xhat = (ld(xp, o) - mp[c]) * ip[c];
        st(dp, o, k * (g - sum_dy[size_t(c)] / count - xhat * sum_dy_xhat[size_t(c)] / count));
      } else {
        st(dp, o, k * g);
      }
    });
  });
  if (dw.defined()) write_vec(dw, dwv);
  if (db.defined()) write_vec(db, dbv);
}

}  // namespace lt
