// Batch norm over NCHW images on the CPU: per channel, two passes (mean, then the mean squared
// deviation) in the accumulation type; the parameters and running statistics may have another
// floating dtype than x (f32 parameters under 16-bit autocast).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

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

struct BnDims {
  int64_t N, C, HW;
  int64_t at(int64_t n, int64_t c, int64_t i) const { return (n * C + c) * HW + i; }
};

BnDims dims_of(const Tensor& x) { return {x.size(0), x.size(1), x.size(2) * x.size(3)}; }

}  // namespace

void CpuBackend::batchnorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& num_batches_tracked,
                               const BatchNormArgs& args) {
  const BnDims s = dims_of(x);
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
    for (int64_t c = 0; c < s.C; ++c) {
      A mu, inv;
      if (args.training) {
        A sum = 0;
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) sum += ld(xp, s.at(n, c, i));
        mu = sum / count;
        A sq = 0;
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const A dv = ld(xp, s.at(n, c, i)) - mu;
            sq += dv * dv;
          }
        const A var = sq / count;
        inv = A(1) / std::sqrt(var + A(args.eps));
        if (running_mean.defined()) {
          const double m = double(args.momentum);
          rm[size_t(c)] = (1 - m) * rm[size_t(c)] + m * double(mu);
          rv[size_t(c)] = (1 - m) * rv[size_t(c)] + m * double(sq / (count - A(1)));
        }
      } else {
        mu = A(rm[size_t(c)]);
        inv = A(1) / std::sqrt(A(rv[size_t(c)]) + A(args.eps));
      }
      mp[c] = mu;
      ip[c] = inv;
      const A scale = inv * A(wv[size_t(c)]), shift = A(bv[size_t(c)]);
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t i = 0; i < s.HW; ++i) st(yp, s.at(n, c, i), (ld(xp, s.at(n, c, i)) - mu) * scale + shift);
    }
    if (args.training && running_mean.defined()) {
      write_vec(running_mean, rm);
      write_vec(running_var, rv);
      if (num_batches_tracked.defined()) num_batches_tracked.data<int64_t>()[0] += 1;
    }
  });
}

void CpuBackend::batchnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                               bool training) {
  const BnDims s = dims_of(x);
  const std::vector<double> wv = read_vec(w, s.C, 1.0);
  std::vector<double> dwv(size_t(s.C)), dbv(size_t(s.C));
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    const T* gp = dy.data<T>();
    const A* mp = aux_data<A>(mean);
    const A* ip = aux_data<A>(invstd);
    const A count = A(s.N * s.HW);
    for (int64_t c = 0; c < s.C; ++c) {
      const A mu = mp[c], inv = ip[c];
      A sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t i = 0; i < s.HW; ++i) {
          const A g = ld(gp, s.at(n, c, i));
          sum_dy += g;
          sum_dy_xhat += g * (ld(xp, s.at(n, c, i)) - mu) * inv;
        }
      dwv[size_t(c)] = double(sum_dy_xhat);
      dbv[size_t(c)] = double(sum_dy);
      if (!dx.defined()) continue;
      T* dp = dx.data<T>();
      const A k = A(wv[size_t(c)]) * inv;
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t i = 0; i < s.HW; ++i) {
          const int64_t at = s.at(n, c, i);
          const A g = ld(gp, at);
          if (training) {
            const A xhat = (ld(xp, at) - mu) * inv;
            st(dp, at, k * (g - sum_dy / count - xhat * sum_dy_xhat / count));
          } else {
            st(dp, at, k * g);
          }
        }
    }
  });
  if (dw.defined()) write_vec(dw, dwv);
  if (db.defined()) write_vec(db, dbv);
}

}  // namespace lt
